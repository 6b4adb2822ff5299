#!/bin/bash
# Round22, one sitting on the final library of issue 19: the core tables before/after
# against 0bb1045 (round18's library, the last one issue 19's whole table was measured on;
# round19's commands), then issue 19's rows with round16's commands exactly (outputs in
# docs/bench/round22/issue/). Times in sitting/sitting.txt and issue/sitting.txt.
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round22/sitting
mkdir -p $O docs/bench/round22/issue
BASE_COMMIT=${BASE_COMMIT:-0bb1045}
source docs/bench/before_after.sh
echo "cpu: $(lscpu | grep 'Model name' | tr -s ' ')" >> $O/sitting.txt
$AR --np 2 --sizes 256K..64M --backends pytfcomm,pytfcomm-tcp,mpi-shm,mpi-tcp --iters 20 --rounds 5 --json $O/np2.json > $O/np2.txt 2>&1
$AR --np 4 --sizes 1M..16M:2 --backends pytfcomm,pytfcomm-tcp,mpi-shm,mpi-tcp --iters 20 --rounds 5 --json $O/np4.json > $O/np4.txt 2>&1
echo "before/after done $(date -u '+%F %T') UTC" >> $O/sitting.txt
sed -e 's|docs/bench/round16|docs/bench/round22/issue|g' -e '/^cd /d' docs/bench/round16/sitting.sh | bash
echo "end $(date -u '+%F %T') UTC" >> $O/sitting.txt
