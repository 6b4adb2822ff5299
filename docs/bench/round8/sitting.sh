#!/bin/bash
# Issue 19's table in one sitting (round8), every library comparison in alternating rounds
# (benchmarks/allreduce.py --rounds: backend A then B, then B then A, ...), plus the core
# tables of the README (N=2 and N=4, 4 KiB-256 MiB, every backend) the same way.
# No change to the core since round6/round7: this sitting measures, it compares no builds.
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round8
rm -f $O/*.txt $O/*.json $O/*.err $O/*.png
PY=.venv/bin/python
AR="$PY -m benchmarks.allreduce --quiet"
echo "start $(date -u '+%F %T') UTC, commit $(git rev-parse --short HEAD)" > $O/sitting.txt
$PY -m benchmarks.tf_multiworker --np 2 --repeat 5 --json $O/tf_multiworker.json > $O/tf_multiworker.txt 2> $O/tf_multiworker.err
echo "tf_multiworker done $(date -u '+%T')" >> $O/sitting.txt
$AR --np 2 --sizes 4M,16M,64M --backends pytfcomm,mpi-shm --iters 20 --rounds 5 --json $O/shm2.json > $O/shm2.txt 2>&1
$AR --np 2 --sizes 1M,4M,16M,64M --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 5 --json $O/tcp2.json > $O/tcp2.txt 2>&1
$AR --np 4 --sizes 1M..4M:2 --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 5 --json $O/tcp4.json > $O/tcp4.txt 2>&1
echo "issue rows done $(date -u '+%T')" >> $O/sitting.txt
for i in 1 2 3 4 5; do
  $PY -m benchmarks.tf_local > $O/tf_local_$i.txt 2>&1
done
echo "tf_local done $(date -u '+%T')" >> $O/sitting.txt
# The README's core tables: every backend but pytfcomm-shm (what `pytfcomm` picks on one
# host). TCP ratios per round (against pytfcomm-tcp) come from the JSON's round_us.
ALL=pytfcomm,pytfcomm-tcp,gloo,mpi-shm,mpi-tcp,tf-ring
$AR --np 2 --sizes 4K..256M --iters 50 --rounds 3 --backends $ALL --json $O/allreduce_np2.json --plot $O/allreduce_np2.png > $O/allreduce_np2.txt 2>&1
$AR --np 4 --sizes 4K..256M --iters 30 --tf-max-size 16M --rounds 3 --backends $ALL --json $O/allreduce_np4.json --plot $O/allreduce_np4.png > $O/allreduce_np4.txt 2>&1
echo "end $(date -u '+%F %T') UTC" >> $O/sitting.txt
