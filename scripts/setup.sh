#!/usr/bin/env bash
# Set up everything pytfcomm needs on a fresh Debian machine, idempotently:
# system packages (when root), a virtual environment in .venv with the
# build and test requirements, and pytfcomm itself built from this checkout.
#   scripts/setup.sh            build + test requirements
#   scripts/setup.sh --bench    also the benchmark peers (torch Gloo, Open MPI + mpi4py)
#   scripts/setup.sh --packages only the system packages (scripts/test.sh starts the
#                               stages that need no venv right after them)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${PYTFCOMM_VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}
WITH_BENCH=0
PACKAGES_ONLY=0
[[ "${1:-}" == "--bench" ]] && WITH_BENCH=1
[[ "${1:-}" == "--packages" ]] && PACKAGES_ONLY=1

log() { printf '[setup] %s\n' "$*" >&2; }

apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  if [[ $(id -u) -ne 0 ]]; then
    log "missing Debian packages: ${missing[*]} (not root: install them with apt-get)"
    return 0
  fi
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${missing[@]}" >/dev/null
}

# C++ unit tests (GoogleTest), formatting check, shell script check
# (scripts/lint.sh), network namespaces for tests, clang with its runtime for
# the libFuzzer target (fuzz/run.sh), and Slurm with munge for
# tests/launch/test_slurm.py (which starts its own one-node cluster), and MPICH
# (mpiexec.hydra; Open MPI keeps the mpirun name) for tests/launch/test_job_agreement.py.
apt_install libgtest-dev clang-format shellcheck iproute2 clang libclang-rt-14-dev slurm-wlm munge mpich
[[ $PACKAGES_ONLY -eq 1 ]] && exit 0

if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $VENV"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

# Reinstall requirements only when the requirement list changed.
stamp="$VENV/.pytfcomm-requirements.sha1"
want=$(sha1sum requirements-dev.txt | cut -d' ' -f1)
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  log "installing requirements-dev.txt into $VENV"
  "$VPY" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
  # tf-keras (TF_USE_LEGACY_KERAS=1) without its dependencies: they would pull
  # the full tensorflow wheel next to tensorflow-cpu.
  "$VPY" -m pip install -q --disable-pip-version-check --no-deps tf-keras==2.21.0
  # torchrun for the real-torchrun launch test: torch's CPU wheel (190 MB), only where pip
  # finds it among local wheels (the +cpu label is on no index pip reads by default); a
  # plain `torch` would pull several GB of CUDA wheels. Without it that one test skips.
  "$VPY" -m pip install -q --disable-pip-version-check "torch==2.13.0+cpu" 2>/dev/null \
    || log "no torch CPU wheel on hand: tests/launch's real-torchrun test will skip"
  echo "$want" >"$stamp"
fi

if [[ $WITH_BENCH -eq 1 ]]; then
  bash scripts/setup_bench.sh "$VENV"
fi

# Build and install pytfcomm from this checkout. No build isolation: the build
# uses the venv's scikit-build-core/pybind11 (and TensorFlow's headers for the
# TF ops), and the build directory under build/ makes rebuilds incremental.
log "building and installing pytfcomm"
"$VPY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps . \
  || { log "build failed; rerun with: $VPY -m pip install -v --no-build-isolation ."; exit 1; }
(cd / && "$VPY" -c "import pytfcomm, sys; sys.stderr.write(f'[setup] pytfcomm {pytfcomm.__version__} ready\n')")
