#!/bin/bash
# Round9: the log-depth negotiation over frames (4df4992) and the one-shot limit over
# frames (fe46c53), before/after in one sitting. Every table runs pytfcomm's backends
# both from this checkout's installed build and from 0b9169a's (NAME@base, installed
# with pip --target into $BASE), with the MPI peer, in alternating rounds.
# Round10 reruns it with O and BASE_COMMIT set (docs/bench/round10/sitting.sh).
set -u
cd "$(dirname "$0")/../../.."
O=${O:-docs/bench/round9}
BASE_COMMIT=${BASE_COMMIT:-0b9169a}
source docs/bench/before_after.sh
$AR --np 4 --sizes 4K..256K --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 100 --rounds 7 --json $O/tcp4_small.json > $O/tcp4_small.txt 2>&1
$AR --np 4 --sizes 1M..4M:2 --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 5 --json $O/tcp4.json > $O/tcp4.txt 2>&1
$AR --np 8 --sizes 4K..1M --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 50 --rounds 5 --json $O/tcp8.json > $O/tcp8.txt 2>&1
$AR --np 2 --sizes 4K..64M --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 50 --rounds 7 --json $O/tcp2.json > $O/tcp2.txt 2>&1
# Shared memory on one host keeps its areas: no change expected, so this table shows
# how far two runs of the same code path drift apart on this VM.
$AR --np 4 --sizes 4K..1M --backends pytfcomm,mpi-shm --ref pytfcomm --iters 30 --rounds 7 --json $O/shm4.json > $O/shm4.txt 2>&1
echo "end $(date -u '+%F %T') UTC" >> $O/sitting.txt
