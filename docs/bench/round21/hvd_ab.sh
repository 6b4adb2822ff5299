#!/bin/bash
# Round21's before/after: the build of $1 (a `pip install --target` directory of
# 8b9c818) against the installed one, alternating, $2 passes (default 3), N=2 over
# shared memory, with pytfcomm-run's malloc huge pages. $3: the script (default
# hvd_ab.py: hvd.reducescatter and hvd.alltoall; allgather_ab.py: pytfcomm.tf.allgather;
# grouped.py: hvd.grouped_reducescatter).
set -eu
old=$1
passes=${2:-3}
script=${3:-hvd_ab.py}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python}
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1
run() {  # label, PYTHONPATH
  port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  PYTHONPATH=$2 $py "$here/$script" 1 2 "$port" > /dev/null 2>&1 &
  PYTHONPATH=$2 $py "$here/$script" 0 2 "$port" 2> /dev/null | sed "s/^/$1 /"
  wait
}
for i in $(seq "$passes"); do
  echo "# pass $i"
  run before "$old"
  run after ""
done
