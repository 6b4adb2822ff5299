#!/bin/bash
# Round15 A/B after the sitting, on a71c51d: PYTFCOMM_YIELD_SPIN_US 50 (the new default)
# against 200 (the old), 8 ranks over TCP on 2 cores at 1-4 MiB, beside MPI's TCP path,
# eight alternating passes. The sitting's before/after had 8 ranks 6-18% slower than dc59a0f.
# Summary: python docs/bench/round15/ab_summary.py docs/bench/round15/ab_yield8
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round15/ab_yield8
PY=${PY:-.venv/bin/python}
mkdir -p $O
for i in $(seq 1 8); do
  order="200 50"; [ $((i % 2)) = 0 ] && order="50 200"
  for ys in $order; do
    PYTFCOMM_YIELD_SPIN_US=$ys $PY -m benchmarks.allreduce --quiet --np 8 --sizes 1M,2M,4M \
      --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 20 --rounds 1 \
      --json $O/np8_${ys}_$i.json > $O/np8_${ys}_$i.txt 2>&1
  done
done
