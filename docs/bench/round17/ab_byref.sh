#!/bin/bash
# Round17 A/B on 4fe7b04: PYTFCOMM_SHM_BYREF_BYTES 4194304 (the default until round17) against
# 2097152, shared memory, 2, 3, 4 and 8 ranks on the 2-vCPU VM, eight passes, order
# alternating. Sizes: the ones the change moves to reading the sender's memory (2 MiB per
# rank: 4M at N=2, 6M at N=3, 8M at N=4, 16M at N=8) and one neighbour below that neither
# setting changes (a control for the noise between runs).
# Summary: python docs/bench/round17/ab_summary.py docs/bench/round17/ab_byref
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round17/ab_byref
PY=${PY:-.venv/bin/python}
mkdir -p $O
for i in $(seq 1 8); do
  order="4194304 2097152"; [ $((i % 2)) = 0 ] && order="2097152 4194304"
  for np in 2 3 4 8; do
    case $np in 2) sizes=2M,4M,8M ;; 3) sizes=3M,6M ;; 4) sizes=4M,8M ;; 8) sizes=8M,16M ;; esac
    for b in $order; do
      PYTFCOMM_SHM_BYREF_BYTES=$b $PY -m benchmarks.allreduce --quiet --np $np --sizes $sizes \
        --backends pytfcomm --iters 20 --rounds 1 \
        --json $O/np${np}_${b}_$i.json > $O/np${np}_${b}_$i.txt 2>&1
    done
  done
done
