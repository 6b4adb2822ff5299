#!/bin/bash
# tf_cold.py for every step-before and size, twice, alternating (tf_cold.txt).
set -u
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python}
echo "# $(date -u '+%F %T') UTC, $(git -C "$here" rev-parse --short HEAD)"
for pass in 1 2; do
  for spec in "none 16777216" "allreduce 1048576" "allreduce 16777216" "numpy 1048576" "numpy 16777216"; do
    port=$((20000 + RANDOM % 20000))
    "$py" "$here/tf_cold.py" 0 $port $spec 2>/dev/null &
    "$py" "$here/tf_cold.py" 1 $port $spec >/dev/null 2>&1
    wait
  done
done
