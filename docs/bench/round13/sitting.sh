#!/bin/bash
# Round13: out-of-place all-reduces receive reduce-scatter pieces straight into `out`
# (ring, halving-doubling), and the TF op reduces a lone tensor TF hands over in place.
#  1. before/after in one sitting: every pytfcomm backend from this checkout's installed
#     build and, as NAME@base, from 9ef87bc's (round12's code), MPI beside both, in
#     alternating rounds, every rank bound to its cores;
#  2. issue 19's table as round11 measured it (tf_multiworker --repeat 5, the N=2/N=4 core
#     rows against MPI, tf_local five times), and the TF rows of the base build (--repeat 3).
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round13
BASE_COMMIT=${BASE_COMMIT:-9ef87bc}
rm -f $O/*.err $O/*.png
source docs/bench/before_after.sh
$AR --np 2 --sizes 256K..64M --backends pytfcomm,pytfcomm-tcp,mpi-shm,mpi-tcp --iters 20 --rounds 5 --json $O/np2.json > $O/np2.txt 2>&1
$AR --np 4 --sizes 1M..16M:2 --backends pytfcomm,pytfcomm-tcp,mpi-shm,mpi-tcp --iters 20 --rounds 5 --json $O/np4.json > $O/np4.txt 2>&1
echo "before/after done $(date -u '+%F %T') UTC" >> $O/sitting.txt
$PY -m benchmarks.tf_multiworker --np 2 --repeat 5 --json $O/tf_multiworker.json > $O/tf_multiworker.txt 2> $O/tf_multiworker.err
PYTHONPATH=$BASE $PY -m benchmarks.tf_multiworker --np 2 --repeat 3 --json $O/tf_multiworker_base.json > $O/tf_multiworker_base.txt 2> $O/tf_multiworker_base.err
echo "tf_multiworker done $(date -u '+%F %T') UTC" >> $O/sitting.txt
$PY -m benchmarks.allreduce --quiet --np 2 --sizes 4M,16M,64M --backends pytfcomm,mpi-shm --iters 20 --rounds 5 --json $O/shm2.json > $O/shm2.txt 2>&1
$PY -m benchmarks.allreduce --quiet --np 2 --sizes 1M,4M,16M,64M --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 5 --json $O/tcp2.json > $O/tcp2.txt 2>&1
$PY -m benchmarks.allreduce --quiet --np 4 --sizes 1M..4M:2 --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 5 --json $O/tcp4.json > $O/tcp4.txt 2>&1
echo "issue rows done $(date -u '+%F %T') UTC" >> $O/sitting.txt
for i in 1 2 3 4 5; do
  $PY -m benchmarks.tf_local > $O/tf_local_$i.txt 2>&1
done
echo "end $(date -u '+%F %T') UTC" >> $O/sitting.txt
