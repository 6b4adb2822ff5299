#!/bin/bash
# Round15 A/B, run on dc59a0f before 5a35dcf: 4 ranks over TCP (2 cores) at 2 and 4 MiB,
# beside MPI's TCP path, ten alternating passes (A B C, then C B A):
#   A: as dc59a0f ran (halving-doubling up to 2 MiB in 256 KiB segments, the ring above in
#      512 KiB);
#   B: PYTFCOMM_SEGMENT_BYTES=524288, so halving-doubling at 2 MiB uses 512 KiB segments, what
#      5a35dcf made the default (at 4 MiB the ring: the same as A);
#   C: B and PYTFCOMM_HALVING_BYTES=4 MiB (halving-doubling at 4 MiB too; at 2 MiB as B).
# Summary: python docs/bench/round15/ab_summary.py docs/bench/round15/ab_hd
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round15/ab_hd
PY=${PY:-.venv/bin/python}
mkdir -p $O
for i in $(seq 1 10); do
  order="A B C"; [ $((i % 2)) = 0 ] && order="C B A"
  for cfg in $order; do
    case $cfg in
      A) e="" ;;
      B) e="PYTFCOMM_SEGMENT_BYTES=524288" ;;
      C) e="PYTFCOMM_SEGMENT_BYTES=524288 PYTFCOMM_HALVING_BYTES=4194304" ;;
    esac
    env $e $PY -m benchmarks.allreduce --quiet --np 4 --sizes 2M,4M \
      --backends pytfcomm-tcp,mpi-tcp --ref pytfcomm-tcp --iters 30 --rounds 1 \
      --json $O/np4_${cfg}_$i.json > $O/np4_${cfg}_$i.txt 2>&1
  done
done
