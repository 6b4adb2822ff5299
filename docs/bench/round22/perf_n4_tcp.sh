#!/bin/bash
# 4 ranks on 2 cores all-reducing 4 MiB over TCP for 8 s (round23's loop.py; the run in
# perf_n4_tcp.txt used a copy of it fixed at 4 ranks with 20 warm-up calls instead of 10), the whole
# machine sampled by perf for 3 s of it; prints where the CPU went (perf_n4_tcp.txt).
set -u
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python}
port=$((20000 + RANDOM % 20000))
for r in 0 1 2 3; do PYTFCOMM_TRANSPORT=tcp "$py" "$here/../round23/loop.py" $r 4 $port 8 4194304 & done
sleep 3
perf record -F 4000 -a -g -o /tmp/perf_n4.data -- sleep 3 2>/dev/null
wait
perf report -i /tmp/perf_n4.data --no-children --sort dso --stdio -g none 2>/dev/null | grep "%" | head -6
perf report -i /tmp/perf_n4.data --no-children --sort sym --stdio -g none 2>/dev/null | grep "%" | head -12
