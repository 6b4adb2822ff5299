#!/bin/bash
# Round14 A/B: 512 KiB ring segments when ranks outnumber cores over TCP
# (PYTFCOMM_OVERSUB_SEGMENT_BYTES, the default) against 256 KiB (=off), alternating runs,
# each beside MPI's TCP path in the same run. N=4 at 1-16 MiB, N=3 and N=8 at 4-16 MiB.
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round14/ab
PY=${PY:-.venv/bin/python}
PAIRS=${PAIRS:-5}
mkdir -p $O
echo "start $(date -u '+%F %T') UTC, $(git rev-parse --short HEAD)" > $O/sitting.txt
for i in $(seq 1 $PAIRS); do
  for np in 4 3 8; do
    sizes=1M..16M:2; [ $np = 4 ] || sizes=4M..16M:2
    for seg in auto off; do
      env $([ $seg = off ] && echo PYTFCOMM_OVERSUB_SEGMENT_BYTES=off) \
        $PY -m benchmarks.allreduce --quiet --np $np --sizes $sizes \
        --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 1 \
        --json $O/np${np}_${seg}_$i.json > $O/np${np}_${seg}_$i.txt 2>&1
    done
  done
done
echo "end $(date -u '+%F %T') UTC" >> $O/sitting.txt
