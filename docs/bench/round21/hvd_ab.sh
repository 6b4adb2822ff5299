#!/bin/bash
# Round21's before/after of hvd.reducescatter and hvd.alltoall: the build of $1 (a
# `pip install --target` directory of 8b9c818) against the installed one, alternating,
# $2 passes (default 3), N=2 over shared memory, with pytfcomm-run's malloc huge pages.
set -eu
old=$1
passes=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python}
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1
run() {  # label, PYTHONPATH
  port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  PYTHONPATH=$2 $py "$here/hvd_ab.py" 1 2 "$port" > /dev/null 2>&1 &
  PYTHONPATH=$2 $py "$here/hvd_ab.py" 0 2 "$port" 2> /dev/null | sed "s/^/$1 /"
  wait
}
for i in $(seq "$passes"); do
  echo "# pass $i"
  run before "$old"
  run after ""
done
