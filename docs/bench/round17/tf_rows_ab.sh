#!/bin/bash
# Round17: issue 19's TF rows (tf_multiworker --repeat 5, as in issue_rows.sh) under the old
# default PYTFCOMM_SHM_BYREF_BYTES=4194304 and the new one again, right after issue_rows.sh
# (whose tf_multiworker ran with the new default): before/after in one sitting.
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round17/tf_rows_ab
PY=${PY:-.venv/bin/python}
mkdir -p $O
for b in 4194304 2097152; do
  PYTFCOMM_SHM_BYREF_BYTES=$b $PY -m benchmarks.tf_multiworker --np 2 --repeat 5 \
    --json $O/tf_multiworker_$b.json > $O/tf_multiworker_$b.txt 2> $O/tf_multiworker_$b.err
done
