#!/bin/bash
# Issue 19's table in one sitting, with the core's before/after (a9f2256 = before the fused sum).
# The baseline was built with:
#   git worktree add /tmp/base a9f2256 && cd /tmp/base &&
#   /work/main/.venv/bin/python -m pip install --no-build-isolation --no-deps --target /tmp/base_pkg .
set -u
cd /work/main
O=docs/bench/round5b
rm -rf $O && mkdir -p $O
PY=.venv/bin/python
BASE=/tmp/base_pkg
echo "start $(date -u '+%F %T') UTC, commit $(git rev-parse --short HEAD); baseline a9f2256 from PYTHONPATH=$BASE" > $O/sitting.txt
$PY -m benchmarks.tf_multiworker --np 2 --repeat 5 --json $O/tf_multiworker_repeat5.json > $O/tf_multiworker_repeat5.txt 2> $O/tf_multiworker.err
echo "tf_multiworker done $(date -u '+%T')" >> $O/sitting.txt
for i in 1 2 3 4 5; do
  $PY -m benchmarks.allreduce --np 4 --sizes 1M..4M:2 --backends pytfcomm-tcp,mpi-tcp --iters 20 > $O/tcp4_$i.txt 2>&1
  PYTHONPATH=$BASE $PY -m benchmarks.allreduce --np 4 --sizes 1M..4M:2 --backends pytfcomm-tcp --iters 20 > $O/base_tcp4_$i.txt 2>&1
  $PY -m benchmarks.allreduce --np 2 --sizes 4M,16M,64M --backends pytfcomm,pytfcomm-tcp,mpi-tcp,mpi-shm --iters 20 > $O/tcp2_$i.txt 2>&1
  PYTHONPATH=$BASE $PY -m benchmarks.allreduce --np 2 --sizes 4M,16M,64M --backends pytfcomm,pytfcomm-tcp --iters 20 > $O/base_tcp2_$i.txt 2>&1
done
echo "allreduce done $(date -u '+%T')" >> $O/sitting.txt
for i in 1 2 3 4 5; do
  $PY -m benchmarks.tf_local > $O/tf_local_$i.txt 2>&1
  if [ $i -le 3 ]; then
    PYTHONPATH=$BASE $PY -m benchmarks.tf_local --only pytfcomm.RingAllReduce,tf.ReductionToOneDevice > $O/base_tf_local_$i.txt 2>&1
  fi
done
echo "end $(date -u '+%F %T') UTC" >> $O/sitting.txt
