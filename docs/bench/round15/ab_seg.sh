#!/bin/bash
# Round15's first A/B, run on dc59a0f: PYTFCOMM_SEGMENT_BYTES 262144 (the default) against
# 524288, 4 and 8 ranks over TCP on 2 cores at 1 and 2 MiB (halving-doubling, auto's pick
# there), beside MPI's TCP path, six passes.
# Summary: python docs/bench/round15/ab_summary.py docs/bench/round15/ab_seg
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round15/ab_seg
PY=${PY:-.venv/bin/python}
mkdir -p $O
for i in 1 2 3 4 5 6; do
  for np in 4 8; do
    for seg in 262144 524288; do
      PYTFCOMM_SEGMENT_BYTES=$seg $PY -m benchmarks.allreduce --quiet --np $np --sizes 1M,2M \
        --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 30 --rounds 1 \
        --json $O/np${np}_${seg}_$i.json > $O/np${np}_${seg}_$i.txt 2>&1
    done
  done
done
