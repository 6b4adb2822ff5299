#!/bin/bash
# Round15 A/B, run on 5a35dcf (before 26c9b1b): PYTFCOMM_YIELD_SPIN_US 200 (the old default),
# 50 (the new one) and 0, 4 and 8 ranks over TCP on 2 cores, beside MPI's TCP path, six
# alternating passes.
# Summary: python docs/bench/round15/ab_summary.py docs/bench/round15/ab_yield
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round15/ab_yield
PY=${PY:-.venv/bin/python}
mkdir -p $O
for i in $(seq 1 6); do
  order="200 50 0"; [ $((i % 2)) = 0 ] && order="0 50 200"
  for np in 4 8; do
    sizes=256K,1M,2M,4M,16M; [ $np = 8 ] && sizes=1M,2M,4M
    for ys in $order; do
      PYTFCOMM_YIELD_SPIN_US=$ys $PY -m benchmarks.allreduce --quiet --np $np --sizes $sizes \
        --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 1 \
        --json $O/np${np}_${ys}_$i.json > $O/np${np}_${ys}_$i.txt 2>&1
    done
  done
done
