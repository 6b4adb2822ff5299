#!/bin/bash
# Round18: does what runs just before tf_multiworker's timed 16 MiB per-call all-reduce move
# its time? Two workers (CPU 0 and 1, glibc's hugetlb malloc as tf_multiworker sets it),
# 10 iterations as tf_multiworker's default; each pass runs, for the strategy (mwms) and the
# Horovod-style path (hvd): the strategy's old sequence (reduce, chain of 8), the Horovod-style
# one (reduce, chain, NumPy all-reduce, identity), and the old sequence with an untimed
# barrier before every call. Prints each rank's medians (ms).
set -u
cd "$(dirname "$0")"
PY=${PY:-../../../.venv/bin/python}
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1 ITERS=${ITERS:-10}
date -u +%F' '%T' UTC'
for pass in 1 2 3; do
  for b in mwms hvd; do
    for case in "reduce,graph 0" "reduce,graph,numpy,tfcall 0" "reduce,graph 1"; do
      set -- $case
      ports=$($PY -c "import socket
s = [socket.socket() for _ in range(3)]
[x.bind(('127.0.0.1', 0)) for x in s]
print(' '.join(str(x.getsockname()[1]) for x in s))")
      r1=$(mktemp)
      SEQ=$1 BARRIER=$2 timeout 120 taskset -c 0 $PY sequence.py 0 $ports $b 2>/dev/null &
      SEQ=$1 BARRIER=$2 timeout 120 taskset -c 1 $PY sequence.py 1 $ports $b >"$r1" 2>/dev/null
      wait
      echo "pass $pass: $(cat "$r1")"
      rm -f "$r1"
    done
  done
done
date -u +%F' '%T' UTC'
