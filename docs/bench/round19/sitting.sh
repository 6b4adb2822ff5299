#!/bin/bash
# Round19: before/after in one sitting for 878c4db (NumPy results without out= from the
# output cache; the cache's lock held across fork). Every pytfcomm backend from this
# checkout's installed build and, as NAME@base, from 0bb1045's (round18's library code),
# MPI beside both, in alternating rounds, every rank bound to its cores (round14's core
# commands); then no_out.sh (with and without out=, before and after).
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round19/sitting
mkdir -p $O
BASE_COMMIT=${BASE_COMMIT:-0bb1045}
source docs/bench/before_after.sh
$AR --np 2 --sizes 256K..64M --backends pytfcomm,pytfcomm-tcp,mpi-shm,mpi-tcp --iters 20 --rounds 5 --json $O/np2.json > $O/np2.txt 2>&1
$AR --np 4 --sizes 1M..16M:2 --backends pytfcomm,pytfcomm-tcp,mpi-shm,mpi-tcp --iters 20 --rounds 5 --json $O/np4.json > $O/np4.txt 2>&1
echo "before/after done $(date -u '+%F %T') UTC" >> $O/sitting.txt
BASE=$BASE bash docs/bench/round19/no_out.sh > $O/no_out.txt 2>&1
echo "end $(date -u '+%F %T') UTC" >> $O/sitting.txt
