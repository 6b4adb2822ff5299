#!/bin/bash
# Round15: halving-doubling in 512 KiB segments at 2 MiB, and PYTFCOMM_YIELD_SPIN_US 50 us, over
# TCP when ranks outnumber cores; issue 19's table again.
#  1. before/after in one sitting: every pytfcomm backend from this checkout's installed
#     build and, as NAME@base, from dc59a0f's (round14's code), MPI beside both, in
#     alternating rounds, every rank bound to its cores;
#  2. issue 19's table as round13 measured it (tf_multiworker --repeat 5, the N=2/N=4 core
#     rows against MPI, tf_local five times);
#  3. five alternating rounds of the 64 MiB shared-memory row and benchmarks.shm_ceiling:
#     the same all-reduce's memory passes alone, as pytfcomm must run them on private
#     buffers (process_vm_readv) and as they would run on buffers both ranks map.
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round15
BASE_COMMIT=${BASE_COMMIT:-dc59a0f}
source docs/bench/before_after.sh
$AR --np 2 --sizes 256K..64M --backends pytfcomm,pytfcomm-tcp,mpi-shm,mpi-tcp --iters 20 --rounds 5 --json $O/np2.json > $O/np2.txt 2>&1
$AR --np 4 --sizes 1M..16M:2 --backends pytfcomm,pytfcomm-tcp,mpi-shm,mpi-tcp --iters 20 --rounds 5 --json $O/np4.json > $O/np4.txt 2>&1
$AR --np 8 --sizes 1M..4M:2 --backends pytfcomm-tcp,mpi-tcp --iters 20 --rounds 5 --json $O/np8.json > $O/np8.txt 2>&1
echo "before/after done $(date -u '+%F %T') UTC" >> $O/sitting.txt
$PY -m benchmarks.tf_multiworker --np 2 --repeat 5 --json $O/tf_multiworker.json > $O/tf_multiworker.txt 2> $O/tf_multiworker.err
echo "tf_multiworker done $(date -u '+%F %T') UTC" >> $O/sitting.txt
$PY -m benchmarks.allreduce --quiet --np 2 --sizes 1M,4M,16M,64M --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 5 --json $O/tcp2.json > $O/tcp2.txt 2>&1
$PY -m benchmarks.allreduce --quiet --np 4 --sizes 1M..4M:2 --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 5 --json $O/tcp4.json > $O/tcp4.txt 2>&1
for i in 1 2 3 4 5; do
  $PY -m benchmarks.allreduce --quiet --np 2 --sizes 16M,64M --backends pytfcomm,mpi-shm \
    --iters 20 --rounds 1 --json $O/shm2_$i.json > $O/shm2_$i.txt 2>&1
  $PY -m benchmarks.shm_ceiling --sizes 16M,64M --iters 15 --json $O/ceiling_$i.json \
    > $O/ceiling_$i.txt 2>&1
done
echo "issue rows done $(date -u '+%F %T') UTC" >> $O/sitting.txt
for i in 1 2 3 4 5; do
  $PY -m benchmarks.tf_local > $O/tf_local_$i.txt 2>&1
done
echo "end $(date -u '+%F %T') UTC" >> $O/sitting.txt
