#!/bin/bash
# Round17 A/B on 4fe7b04, the TF side: tf_multiworker's pytfcomm rows with
# PYTFCOMM_SHM_BYREF_BYTES 4194304 (the old default) and 2097152, four passes, order
# alternating. Its fused gradient buckets (4 MiB: 2 MiB per rank at N=2) and the MLP's 4 MiB
# kernel are what the change moves to reading the sender's memory.
# O, PASSES and BACKENDS change the folder, pass count and backends (ab_tf_fit.sh).
# Summary: python docs/bench/round17/ab_tf_summary.py docs/bench/round17/ab_tf
set -u
cd "$(dirname "$0")/../../.."
O=${O:-docs/bench/round17/ab_tf}
PASSES=${PASSES:-4}
BACKENDS=${BACKENDS:-pytfcomm-mwms,pytfcomm-horovod}
PY=${PY:-.venv/bin/python}
mkdir -p $O
for i in $(seq 1 $PASSES); do
  order="4194304 2097152"; [ $((i % 2)) = 0 ] && order="2097152 4194304"
  for b in $order; do
    PYTFCOMM_SHM_BYREF_BYTES=$b $PY -m benchmarks.tf_multiworker --np 2 \
      --backends $BACKENDS --json $O/tf_${b}_$i.json \
      > $O/tf_${b}_$i.txt 2> $O/tf_${b}_$i.err
  done
done
