#!/bin/bash
# Where the CPU goes in the rows of issue 19 that stay below target: SIZE ranks all-reducing
# BYTES over TRANSPORT for 8 s (loop.py), the whole machine sampled by perf for 3 s of it.
# Usage: profile.sh SIZE BYTES TRANSPORT  (prints the median call, then DSOs and symbols)
set -u
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python}
size=$1 bytes=$2 transport=$3
port=$((20000 + RANDOM % 20000))
echo "# $(date -u '+%F %T') UTC: $size ranks, $bytes bytes, PYTFCOMM_TRANSPORT=$transport, $(git -C "$here" rev-parse --short HEAD)"
for ((r = 0; r < size; r++)); do
  PYTFCOMM_TRANSPORT=$transport "$py" "$here/loop.py" $r $size $port 8 $bytes &
done
sleep 3
perf record -F 4000 -a -g -o /tmp/pytfcomm_profile.data -- sleep 3 2>/dev/null
wait
perf report -i /tmp/pytfcomm_profile.data --no-children --sort dso --stdio -g none 2>/dev/null | grep "%" | head -5
perf report -i /tmp/pytfcomm_profile.data --no-children --sort sym --stdio -g none 2>/dev/null | grep "%" | head -12
