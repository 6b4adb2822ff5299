#!/bin/bash
# Round22's before/after of the Ctrl-C change: the build of $1 (a `pip install --target`
# directory of 56ace7f, the commit before 4741a34) against the installed one, alternating,
# $2 passes (default 3), N=2, over shared memory and over TCP, with pytfcomm-run's malloc
# huge pages.
set -eu
old=$1
passes=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python}
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1
run() {  # label, PYTHONPATH, transport
  port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  PYTFCOMM_TRANSPORT=$3 PYTHONPATH=$2 taskset -c 1 $py "$here/ops_ab.py" 1 2 "$port" > /dev/null 2>&1 &
  PYTFCOMM_TRANSPORT=$3 PYTHONPATH=$2 taskset -c 0 $py "$here/ops_ab.py" 0 2 "$port" 2> /dev/null \
    | sed "s/^/$3 $1 /"
  wait
}
date -u
for i in $(seq "$passes"); do
  echo "# pass $i"
  for t in shm tcp; do
    run before "$old" "$t"
    run after "" "$t"
  done
done
date -u
