#!/usr/bin/env bash
# Install the all-reduce benchmark peers (benchmarks/allreduce.py) into an existing venv.
#   scripts/setup_bench.sh VENV_DIR [--with-tf]
# Idempotent and non-interactive: Open MPI from Debian (only if Open MPI's mpirun is missing
# and we are root; MPICH, which setup.sh installs for the launcher tests, does not count),
# then torch (CPU), mpi4py, matplotlib, numpy, ml_dtypes;
# tensorflow-cpu for the tf-ring backend only with --with-tf (or when it is already installed).
set -euo pipefail

usage() { echo "usage: $0 VENV_DIR [--with-tf]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
VENV=$1
WITH_TF=0
[[ "${2:-}" == "--with-tf" ]] && WITH_TF=1
[[ $# -le 2 ]] || usage
PY="$VENV/bin/python"
[[ -x "$PY" ]] || { echo "error: $PY not found; create it first: python3 -m venv $VENV" >&2; exit 1; }

TORCH_VERSION=${TORCH_VERSION:-2.13.0}
TF_VERSION=${TF_VERSION:-2.21.0}
export DEBIAN_FRONTEND=noninteractive

have_open_mpi() {
  command -v mpirun.openmpi >/dev/null && return 0
  command -v mpirun >/dev/null && mpirun --version 2>/dev/null | grep -q "Open MPI"
}
if ! have_open_mpi || ! command -v mpicc >/dev/null; then
  if [[ $(id -u) -eq 0 ]]; then
    echo "== installing Open MPI (openmpi-bin libopenmpi-dev)"
    apt-get update -q
    apt-get install -y -q --no-install-recommends openmpi-bin libopenmpi-dev
  else
    echo "warning: Open MPI (mpirun, mpicc) missing and not root: mpi-shm/mpi-tcp will be skipped" >&2
  fi
fi

have() { "$PY" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$1" 2>/dev/null; }
pkgs=()
have numpy || pkgs+=(numpy)
have ml_dtypes || pkgs+=(ml_dtypes)
have matplotlib || pkgs+=(matplotlib)
[[ "$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)" == \
   "$TORCH_VERSION" ]] || pkgs+=("torch==$TORCH_VERSION")
if command -v mpicc >/dev/null && ! "$PY" -c "import mpi4py.MPI" 2>/dev/null; then
  pkgs+=(mpi4py)
fi
if [[ $WITH_TF -eq 1 ]] && ! have tensorflow-cpu && ! have tensorflow; then
  pkgs+=("tensorflow-cpu==$TF_VERSION")
fi

if [[ ${#pkgs[@]} -gt 0 ]]; then
  echo "== pip install ${pkgs[*]}"
  "$PY" -m pip install -q --disable-pip-version-check "${pkgs[@]}"
else
  echo "== benchmark peers already installed in $VENV"
fi

"$PY" - <<'PYEOF'
import importlib.util
for mod in ("numpy", "matplotlib", "torch", "mpi4py", "tensorflow"):
    print(f"  {mod:11s} {'ok' if importlib.util.find_spec(mod) else 'missing'}")
PYEOF
