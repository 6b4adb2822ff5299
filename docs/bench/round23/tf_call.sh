#!/bin/bash
# Both ranks of tf_call.py, three times (tf_call.txt).
set -u
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python}
for pass in 1 2 3; do
  port=$((20000 + RANDOM % 20000))
  echo "# pass $pass, $(date -u '+%F %T') UTC, $(git -C "$here" rev-parse --short HEAD)"
  "$py" "$here/tf_call.py" 0 $port 2>/dev/null &
  "$py" "$here/tf_call.py" 1 $port >/dev/null 2>&1
  wait
done
