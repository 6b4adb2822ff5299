#!/bin/bash
# Round17 A/B on 3396f49 (a local commit with the code of 34e881e, reworded before landing;
# both settings given explicitly), a second look at the Horovod-style `fit` rows, whose medians moved
# most in ab_tf.sh (keras-fit-steady 0.92, keras-fit 0.73 new/old over four passes): the same
# two settings, pytfcomm-horovod alone, eight more passes, order alternating.
# Summary: python docs/bench/round17/ab_tf_summary.py docs/bench/round17/ab_tf_fit
set -u
cd "$(dirname "$0")/../../.."
O=docs/bench/round17/ab_tf_fit
PY=${PY:-.venv/bin/python}
mkdir -p $O
for i in $(seq 1 8); do
  order="4194304 2097152"; [ $((i % 2)) = 0 ] && order="2097152 4194304"
  for b in $order; do
    PYTFCOMM_SHM_BYREF_BYTES=$b $PY -m benchmarks.tf_multiworker --np 2 \
      --backends pytfcomm-horovod --json $O/tf_${b}_$i.json \
      > $O/tf_${b}_$i.txt 2> $O/tf_${b}_$i.err
  done
done
