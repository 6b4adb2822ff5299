#!/bin/bash
# Round16 (issue 19's rows only, no code change since round15): on the 2-vCPU AMD EPYC VM of 2026-11-29.
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round16
PY=.venv/bin/python
echo "start $(date -u '+%F %T') UTC $(lscpu | grep 'Model name' | tr -s ' ') $(git rev-parse --short HEAD)" > $O/sitting.txt
$PY -m benchmarks.tf_multiworker --np 2 --repeat 5 --json $O/tf_multiworker.json > $O/tf_multiworker.txt 2> $O/tf_multiworker.err
echo "tf_multiworker done $(date -u '+%F %T') UTC" >> $O/sitting.txt
$PY -m benchmarks.allreduce --quiet --np 2 --sizes 1M,4M,16M,64M --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 5 --json $O/tcp2.json > $O/tcp2.txt 2>&1
$PY -m benchmarks.allreduce --quiet --np 4 --sizes 1M..4M:2 --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 5 --json $O/tcp4.json > $O/tcp4.txt 2>&1
for i in 1 2 3 4 5; do
  $PY -m benchmarks.allreduce --quiet --np 2 --sizes 16M,64M --backends pytfcomm,mpi-shm \
    --iters 20 --rounds 1 --json $O/shm2_$i.json > $O/shm2_$i.txt 2>&1
done
echo "issue rows done $(date -u '+%F %T') UTC" >> $O/sitting.txt
for i in 1 2 3 4 5; do
  $PY -m benchmarks.tf_local > $O/tf_local_$i.txt 2>&1
done
echo "end $(date -u '+%F %T') UTC" >> $O/sitting.txt
