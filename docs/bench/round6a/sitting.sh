#!/bin/bash
# Issue 19's table in one sitting (round6), with the shared-memory change's before/after:
# "before" is the same build with PYTFCOMM_SHM_BYREF_BYTES=0 (every byte through the ring,
# as before 5d7ee47), interleaved with the default runs.
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round6a
rm -f $O/*.txt $O/*.json $O/*.err
PY=.venv/bin/python
OFF="env PYTFCOMM_SHM_BYREF_BYTES=0"
echo "start $(date -u '+%F %T') UTC, commit $(git rev-parse --short HEAD)" > $O/sitting.txt
$PY -m benchmarks.tf_multiworker --np 2 --repeat 5 --json $O/tf_multiworker_repeat5.json > $O/tf_multiworker_repeat5.txt 2> $O/tf_multiworker.err
echo "tf_multiworker done $(date -u '+%T')" >> $O/sitting.txt
$OFF $PY -m benchmarks.tf_multiworker --np 2 --repeat 5 --json $O/off_tf_multiworker_repeat5.json > $O/off_tf_multiworker_repeat5.txt 2> $O/off_tf_multiworker.err
echo "tf_multiworker (byref off) done $(date -u '+%T')" >> $O/sitting.txt
for i in 1 2 3 4 5; do
  $PY -m benchmarks.allreduce --np 4 --sizes 1M..4M:2 --backends pytfcomm-tcp,mpi-tcp --iters 20 > $O/tcp4_$i.txt 2>&1
  $PY -m benchmarks.allreduce --np 2 --sizes 4M,16M,64M --backends pytfcomm,pytfcomm-tcp,mpi-tcp,mpi-shm --iters 20 > $O/tcp2_$i.txt 2>&1
  $PY -m benchmarks.allreduce --np 2 --sizes 1M..64M --backends pytfcomm --iters 20 > $O/shm2_$i.txt 2>&1
  $OFF $PY -m benchmarks.allreduce --np 2 --sizes 1M..64M --backends pytfcomm --iters 20 > $O/off_shm2_$i.txt 2>&1
  $PY -m benchmarks.allreduce --np 4 --sizes 1M..64M --backends pytfcomm --iters 20 > $O/shm4_$i.txt 2>&1
  $OFF $PY -m benchmarks.allreduce --np 4 --sizes 1M..64M --backends pytfcomm --iters 20 > $O/off_shm4_$i.txt 2>&1
done
echo "allreduce done $(date -u '+%T')" >> $O/sitting.txt
for i in 1 2 3 4 5; do
  $PY -m benchmarks.tf_local > $O/tf_local_$i.txt 2>&1
done
echo "end $(date -u '+%F %T') UTC" >> $O/sitting.txt
