#!/usr/bin/env bash
# Run Horovod 0.28.1's own TensorFlow test file against pytfcomm.horovod, as Horovod's CI
# does: one pytest session per rank, under pytfcomm-run. Every `horovod.X` module is
# `pytfcomm.horovod.X` (scripts/horovod_suite/sitecustomize.py; nothing added).
#   scripts/horovod_suite.sh HOROVOD_CHECKOUT [NP] [pytest args...]
# HOROVOD_CHECKOUT: a clone of github.com/horovod/horovod (its test/parallel and
# test/utils are used; not downloaded here). TF_USE_LEGACY_KERAS=1 runs it on tf-keras,
# the Keras its tests were written for.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HVD=${1:?usage: scripts/horovod_suite.sh HOROVOD_CHECKOUT [NP] [pytest args...]}
NP=${2:-2}
shift $(( $# < 2 ? $# : 2 ))
VENV=${PYTFCOMM_VENV:-$ROOT/.venv}
cd "$HVD/test/parallel"
PYTHONPATH="$ROOT/scripts/horovod_suite${PYTHONPATH:+:$PYTHONPATH}" \
  PYTFCOMM_TIMEOUT=${PYTFCOMM_TIMEOUT:-30} TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2} \
  "$VENV/bin/pytfcomm-run" -np "$NP" "$VENV/bin/python" -m pytest -p no:cacheprovider -q -rfE \
  test_tensorflow.py "$@"
