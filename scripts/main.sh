#!/usr/bin/env bash
# Set everything up (benchmark peers included), then run the main job on the
# embedded defaults: a short distributed training run on pytfcomm, and the
# all-reduce benchmark table of pytfcomm beside torch Gloo, Open MPI and TF's
# own RING collective. Results land in bench-results/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --bench
VENV=${PYTFCOMM_VENV:-$PWD/.venv}
PY="$VENV/bin/python"
mkdir -p bench-results

# TensorFlow's start-up log lines stay out of the output; errors pass (scripts/quiet_tf.sh).
source scripts/quiet_tf.sh

echo "== distributed training: 2 ranks, NumPy data parallel, gradients all-reduced by pytfcomm"
(cd /tmp && quiet_tf "$PY" "$OLDPWD/examples/numpy_data_parallel.py" --np 2 --epochs 10)

# From /tmp: in the checkout, the source tree's pytfcomm/ (no compiled _core)
# would shadow the installed package.
echo "== distributed training: Keras 3 fit, MirroredStrategy on 4 CPU devices, pytfcomm.RingAllReduce"
(cd /tmp && quiet_tf "$PY" "$OLDPWD/examples/mirrored_keras.py")

echo "== distributed training: 2 workers (pytfcomm-run), Keras 3 fit under pytfcomm.MultiWorkerMirroredStrategy"
(cd /tmp && quiet_tf "$VENV/bin/pytfcomm-run" -np 2 "$PY" "$OLDPWD/examples/multiworker_keras.py" --epochs 3)

echo "== all-reduce benchmark, 2 processes on loopback"
quiet_tf "$PY" benchmarks/allreduce.py --np "${BENCH_NP:-2}" --sizes "${BENCH_SIZES:-4K..64M}" --iters 50 \
  --json bench-results/allreduce.json --plot bench-results/allreduce.png
echo "table, JSON and plot: bench-results/allreduce.{json,png}"

echo "== multi-worker TF benchmark: pytfcomm vs TF's MultiWorkerMirroredStrategy RING, 2 workers"
quiet_tf "$PY" -m benchmarks.tf_multiworker --np 2 --json bench-results/tf_multiworker.json
