#!/bin/bash
# Round17: does pytfcomm.MultiWorkerMirroredStrategy's strategy.reduce cost more per call than
# the Horovod-style pytfcomm.allreduce, as tf_multiworker's rows suggest (mwms / horovod per
# call 0.66-1.02 in docs/bench/round17/issue)? Both build the same graph (one
# PytfcommAllReduce with the same attributes); here each runs alone, 2 workers bound to CPU 0
# and 1, glibc's hugetlb malloc as tf_multiworker sets it, calls interleaved as
# tf_multiworker interleaves the strategy's (one per-call reduce, one chain of 8), 40
# iterations, five alternating passes. Prints rank 0's medians in ms.
set -u
cd "$(dirname "$0")"
PY=${PY:-../../../../.venv/bin/python}
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1 ITERS=40
for i in 1 2 3 4 5; do
  order="mwms hvd"; [ $((i % 2)) = 0 ] && order="hvd mwms"
  for b in $order; do
    ports=$($PY -c "import socket
s = [socket.socket() for _ in range(3)]
[x.bind(('127.0.0.1', 0)) for x in s]
print(' '.join(str(x.getsockname()[1]) for x in s))")
    timeout 120 taskset -c 0 $PY probe.py 0 $ports $b mwmslike 2>/dev/null &
    timeout 120 taskset -c 1 $PY probe.py 1 $ports $b mwmslike >/dev/null 2>&1
    wait
  done
done
