#!/bin/bash
# Round20: unequal all-gathers with and without out=, before and after the results the core
# allocates came from the output cache. Two ranks (CPU 0 and 1, glibc's hugetlb malloc as pytfcomm-run
# sets it); BASE=DIR (a `pip install --target DIR` of the build before) and the installed
# build in turn, three passes. Output: uneven.txt.
set -u
cd "$(dirname "$0")"
PY=${PY:-../../../.venv/bin/python}
: "${BASE:?BASE=DIR: the build before, installed with pip install --target DIR}"
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1
date -u +%F' '%T' UTC'
for pass in 1 2 3; do
  for build in before after; do
    pp=""
    [[ $build == before ]] && pp=$BASE
    port=$($PY -c "import socket
s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
    echo "pass $pass, $build:"
    PYTHONPATH=$pp timeout 300 taskset -c 0 $PY uneven.py 0 "$port" 2>/dev/null &
    PYTHONPATH=$pp timeout 300 taskset -c 1 $PY uneven.py 1 "$port" >/dev/null 2>&1
    wait
  done
done
date -u +%F' '%T' UTC'
