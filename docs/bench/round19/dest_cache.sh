#!/bin/bash
# Round19: does the cache state of an all-reduce's output or input move its time? Two ranks
# (CPU 0 and 1, glibc's hugetlb malloc as pytfcomm-run sets it), NumPy buffers, three runs of
# dest_cache.py. Output: dest_cache.txt.
set -u
cd "$(dirname "$0")"
PY=${PY:-../../../.venv/bin/python}
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1
date -u +%F' '%T' UTC'
for run in 1 2 3; do
  port=$($PY -c "import socket
s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  echo "run $run (ms per call, median of each case's 24 timed calls, four rounds):"
  timeout 300 taskset -c 0 $PY dest_cache.py 0 "$port" 2>/dev/null &
  timeout 300 taskset -c 1 $PY dest_cache.py 1 "$port" >/dev/null 2>&1
  wait
done
date -u +%F' '%T' UTC'
