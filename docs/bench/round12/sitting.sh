#!/bin/bash
# Round12: auto picks halving-doubling on 4 and 8 ranks up to PYTFCOMM_HALVING_BYTES
# (7acc74f), before/after in one sitting: every pytfcomm backend from this checkout's
# installed build and, as NAME@base, from 99f7bb1's (round11's code: the ring there),
# with MPI beside both, in alternating rounds; every rank bound to its cores.
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round12
BASE_COMMIT=${BASE_COMMIT:-99f7bb1}
source docs/bench/before_after.sh
$AR --np 4 --sizes 64K..16M:2 --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 30 --rounds 5 --json $O/tcp4.json > $O/tcp4.txt 2>&1
$AR --np 4 --sizes 64K..16M:2 --backends pytfcomm,mpi-shm --ref pytfcomm --iters 30 --rounds 5 --json $O/shm4.json > $O/shm4.txt 2>&1
$AR --np 8 --sizes 64K..4M:2 --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 3 --json $O/tcp8.json > $O/tcp8.txt 2>&1
$AR --np 8 --sizes 64K..4M:2 --backends pytfcomm,mpi-shm --ref pytfcomm --iters 20 --rounds 3 --json $O/shm8.json > $O/shm8.txt 2>&1
# Two ranks keep the ring: no change expected, so this shows how far two builds of the
# same path drift apart on this VM.
$AR --np 2 --sizes 64K..4M --backends pytfcomm-tcp,pytfcomm --ref pytfcomm-tcp --iters 30 --rounds 3 --json $O/np2.json > $O/np2.txt 2>&1
echo "end $(date -u '+%F %T') UTC" >> $O/sitting.txt
