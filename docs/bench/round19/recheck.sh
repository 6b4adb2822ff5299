#!/bin/bash
# Round19: the sitting's N=2 shared-memory rows at 4 and 16 MiB read 0.83 and 0.84 (base /
# new, median per round) though the timed call (allreduce with out=) runs the same code in
# both builds. Re-run of just those two sizes, pytfcomm against pytfcomm@base, 7 alternating
# rounds, three times; then N=4 over shared memory at the sitting's sizes (0.89-1.08 there),
# 5 rounds, twice. BASE=DIR as in sitting.sh. Output: recheck.txt.
set -u
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
: "${BASE:?BASE=DIR: the build before, installed with pip install --target DIR}"
date -u +%F' '%T' UTC'
for i in 1 2 3; do
  $PY -m benchmarks.allreduce --quiet --baseline "$BASE" --np 2 --sizes 4M,16M --backends pytfcomm \
    --iters 20 --rounds 7 2>&1 | grep -A3 "per round:"
done
for i in 1 2; do
  $PY -m benchmarks.allreduce --quiet --baseline "$BASE" --np 4 --sizes 1M..16M:2 --backends pytfcomm \
    --iters 20 --rounds 5 2>&1 | grep -A6 "per round:"
done
date -u +%F' '%T' UTC'
