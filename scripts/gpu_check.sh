#!/usr/bin/env bash
# The GPU check in one command, within one time budget (docs/gpu.md, "On a real GPU").
#
#   scripts/gpu_check.sh [--rehearse] [--wheel FILE | --site DIR] [--budget SECONDS] [--quick]
#
# On a machine with a GPU (nvidia-smi lists one; --rehearse forces the other mode):
# 1. env      the machine: GPU, driver, CUDA, Python, PyTorch, NCCL wheel, MPI.
# 2. install  pytfcomm into a fresh directory: the CUDA wheel given with --wheel, a
#             directory already holding an install (--site), else a source build
#             with PYTFCOMM_WITH_CUDA=ON for this GPU's architecture (all cores).
# 3. info     python -m pytfcomm info from that install (NCCL, ncclCommRevoke, mode).
# 4. nccl-*   benchmarks/nccl.py, 2 ranks sharing the GPU, 4 KiB .. 2 GiB, torch.distributed's
#             NCCL in every run, one run per pytfcomm setting: blocking (revoke watchdog)
#             with verification cached (the default), full or off; non-blocking, full.
# 5. overhead benchmarks/gpu_overhead.py: one rank's per-call cost.
# 6. tests    pytest tests/gpu on the GPU.
# 7. cpu-N    benchmarks/allreduce.py at N = 4, 8, 16 ranks, a core each: pytfcomm
#             (shm, tcp) against Open MPI (shm, tcp) and Gloo where installed.
# Without a GPU (or with --rehearse) the same stages run on the CPU stand-ins of
# libcuda/libnccl (tests/gpu/standin): install = the CUDA build of the core and the
# stand-ins (tests/_gpu_builds.py; PYTFCOMM_TEST_CUDA_BUILD keeps the core's build),
# tests = a selection of tests/gpu (REHEARSE_TESTS), the NCCL runs say why they
# cannot run, overhead = gpu_overhead.py --standin, cpu = N=4 on small sizes.
#
# Every stage has a time limit, cut to what is left of --budget (default 460 s, 1500
# when rehearsing; a
# stage that would get under its minimum is skipped and said so); the next stage
# runs whatever happened. Logs and summary.txt go to $OUT (default ./gpu-check-out).
# PYTHON names the interpreter (default python3). Exit status: 0 when every stage that
# could run passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-check-out}
PY=${PYTHON:-python3}
WHEEL=""
SITE_GIVEN=""
BUDGET=""
QUICK=0
REHEARSE=0
usage="usage: $0 [--rehearse] [--wheel FILE | --site DIR] [--budget SECONDS] [--quick]"
while [[ $# -gt 0 ]]; do
  case $1 in
    --wheel) WHEEL=$(realpath "$2"); shift 2 ;;
    --site) SITE_GIVEN=$(realpath "$2"); shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --rehearse) REHEARSE=1; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
if [[ $REHEARSE == 0 ]] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  REHEARSE=1  # no GPU here: rehearse on the stand-ins
fi
# The device's one call is 8 minutes; rehearsing on a small CPU machine takes longer.
[[ -z $BUDGET ]] && BUDGET=$([[ $REHEARSE == 1 ]] && echo 1500 || echo 460)
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/gpu-check.XXXXXX)
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
FAILED=0
START=$(date +%s)
say() { echo "[gpu_check] $*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }

# stage NAME WANT MIN COMMAND...: runs COMMAND with a time limit of WANT seconds, cut to
# what is left of the budget; skipped when that is under MIN. Output to $OUT/NAME.log.
# Returns COMMAND's status (124: timed out; 125: skipped).
stage() {
  local name=$1 want=$2 min=$3 limit t0 rc
  shift 3
  limit=$(($(left) < want ? $(left) : want))
  if [[ $limit -lt $min ]]; then
    say "$name: SKIPPED, ${limit} s of the budget left (needs $min)"
    return 125
  fi
  t0=$(date +%s)
  timeout -k 5 "$limit" bash -c '"$@"' "$name" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  say "$name: rc=$rc in $(($(date +%s) - t0)) s (limit $limit s)$([[ $rc == 124 ]] && echo ', TIMED OUT')"
  return $rc
}

# shellcheck disable=SC2317  # run by stage()'s `bash -c` (export -f below)
cuda_arch() {  # compute capability of GPU 0 as CMake wants it (9.0 -> 90), or nothing
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .'
}

# shellcheck disable=SC2317
env_report() {
  date -u
  uname -a
  echo "nproc: $(nproc)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.sm,clocks.mem \
    --format=csv 2>&1 || echo "nvidia-smi: not found"
  nvcc --version 2>&1 | tail -2
  c++ --version 2>&1 | head -1
  mpirun --version 2>&1 | head -1 || echo "mpirun: not found"
  "$PY" -V
  "$PY" -m pip list 2>/dev/null | grep -iE '^(torch|cupy[a-z0-9-]*|nvidia-nccl[a-z0-9-]*|numpy|mpi4py|pytest|pytest-xdist|pybind11) '
  "$PY" - <<'EOF'
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())
    if torch.cuda.is_available():
        print("torch NCCL", ".".join(map(str, torch.cuda.nccl.version())))
except Exception as e:  # noqa: BLE001
    print("torch:", e)
EOF
}

# shellcheck disable=SC2317
install_wheel() { "$PY" -m pip install -q --no-deps --no-index --target "$1" "$WHEEL"; }

# shellcheck disable=SC2317
build_from_source() {  # $1: target directory
  local arch args=()
  arch=$(cuda_arch)
  [[ -n $arch ]] && args+=(--config-settings=cmake.define.PYTFCOMM_CUDA_ARCHS="$arch")
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) PYTFCOMM_WITH_CUDA=ON "$PY" -m pip install -q --no-deps \
    --no-build-isolation --target "$1" --config-settings=cmake.define.PYTFCOMM_WITH_TF=OFF \
    --config-settings=build-dir="$WORK/build" "${args[@]}" "$ROOT"
}

# shellcheck disable=SC2317
build_standins() {  # $1: package root, $2: stand-in build; the CUDA core and the stand-ins
  "$PY" - "$1" "$2" <<'EOF'
import os, sys, tempfile
from pathlib import Path
sys.path.insert(0, "tests")
import _gpu_builds as g
if g.MISSING:
    sys.exit(f"cannot build for the stand-ins: {g.MISSING}")
core = Path(os.environ.get("PYTFCOMM_TEST_CUDA_BUILD") or tempfile.mkdtemp(dir=os.environ["WORK"]))
g.configure_core(core)
g.build_targets(core, "_core")
g.make_package(Path(sys.argv[1]), g.core_libs(core))
g.build_standin(Path(sys.argv[2]))
print("core build", core, "; stand-ins", sys.argv[2])
EOF
}

# shellcheck disable=SC2317
info() { (cd "$WORK" && PYTHONPATH=$1 "$PY" -X faulthandler -m pytfcomm info); }

export PY WHEEL WORK ROOT
export NCCL_DEBUG=${NCCL_DEBUG:-WARN} PYTHONUNBUFFERED=1
export -f env_report install_wheel build_from_source build_standins info cuda_arch

MODE=$([[ $REHEARSE == 1 ]] && echo "rehearsal on the CPU stand-ins" || echo "GPU")
say "start $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), python $PY, $MODE, budget $BUDGET s"
stage env 15 5 env_report

SITE=$WORK/site
STANDIN=$WORK/standin
if [[ -n $SITE_GIVEN ]]; then
  SITE=$SITE_GIVEN
  say "install: using $SITE"
elif [[ $REHEARSE == 1 ]]; then
  stage install 900 60 build_standins "$SITE" "$STANDIN" || FAILED=1
elif [[ -n $WHEEL ]]; then
  stage install 120 30 install_wheel "$SITE" || FAILED=1
else
  stage install 170 60 build_from_source "$SITE" || FAILED=1
fi
export PYTHONPATH=$SITE
if [[ $REHEARSE == 1 ]]; then
  export PYTFCOMM_CUDA_DRIVER=$STANDIN/libcuda.so.1 PYTFCOMM_NCCL_LIBRARY=$STANDIN/libnccl.so.2
  export PYTHONPATH=$SITE:$ROOT/tests/gpu/standin PTCSI_GPUS=1
fi

stage info 15 5 info "$SITE" || FAILED=1
NCCL=$(sed -n 's/^ *nccl_version *//p' "$OUT/info.log" | head -1)
GPUS=$(sed -n 's/^ *gpus *//p' "$OUT/info.log" | head -1)
say "GPUs seen by pytfcomm: ${GPUS:-?}; NCCL: ${NCCL:-none}; $(grep -E '^ *nccl_(mode|revoke) ' "$OUT/info.log" | tr -s ' ' | tr '\n' ';')"

# benchmark NAME SECONDS MIN SCRIPT ARGS...: exit 2 is "cannot run here" (no GPU, no
# PyTorch), said and not a failure; a row that failed prints "failed:".
benchmark() {
  local name=$1 limit=$2 min=$3 script=$4
  shift 4
  (cd "$WORK" && stage "$name" "$limit" "$min" "$PY" "$ROOT/benchmarks/$script" "$@")
  case $? in
    0) grep -q "failed:" "$OUT/$name.log" && FAILED=1 ;;
    2) say "$name: could not run here ($(tail -1 "$OUT/$name.log"))" ;;
    125) ;;
    *) FAILED=1 ;;
  esac
}

SIZES=4K,32K,256K,2M,16M,64M,256M,1G,2G
[[ $QUICK == 1 ]] && SIZES=4K,1M,64M
# name  PYTFCOMM_GPU_NCCL_MODE  PYTFCOMM_GPU_VERIFY  PYTFCOMM_GPU_VERIFY_CACHE
AB=("blocking-cached blocking 1 1" "blocking-full blocking 1 0" "nonblocking-full nonblocking 1 0"
  "blocking-off blocking 0 0")
for row in "${AB[@]}"; do
  read -r name mode verify cache <<<"$row"
  PYTFCOMM_GPU_NCCL_MODE=$mode PYTFCOMM_GPU_VERIFY=$verify PYTFCOMM_GPU_VERIFY_CACHE=$cache \
    benchmark "nccl-$name" "${AB_LIMIT:-32}" 15 nccl.py --np 2 --sizes "$SIZES" --ways torch,nccl \
    --iters 10 --deadline $((${AB_LIMIT:-32} - 4))
done

if [[ $REHEARSE == 1 ]]; then
  benchmark overhead 60 20 gpu_overhead.py --standin "$STANDIN" --iters 2000
else
  benchmark overhead 25 10 gpu_overhead.py --sizes 4K --iters 300
fi

ARGS=(-p no:cacheprovider -p no:benchmark -q -rs)
"$PY" -c "import xdist" 2>/dev/null && [[ $REHEARSE == 0 ]] && ARGS+=(-n 4)
if [[ $REHEARSE == 0 ]]; then  # the stand-ins' own tests prove nothing about the GPU
  ARGS+=(--ignore=tests/gpu/test_standin_driver.py --ignore=tests/gpu/test_standin_nccl.py
    --ignore=tests/gpu/test_gpu_timeline.py)
  TESTS=(tests/gpu)
else
  read -r -a TESTS <<<"${REHEARSE_TESTS:-tests/gpu/test_nccl_modes.py}"
  unset PYTFCOMM_CUDA_DRIVER PYTFCOMM_NCCL_LIBRARY  # the suite sets its own
fi
(
  [[ $REHEARSE == 1 ]] && export PYTHONPATH=""  # the suite builds and finds its own
  stage pytest "${TEST_LIMIT:-$([[ $REHEARSE == 1 ]] && echo 700 || echo 80)}" 30 "$PY" -P -m pytest "${ARGS[@]}" "${TESTS[@]}"
) || FAILED=1
if [[ $REHEARSE == 1 ]]; then
  export PYTFCOMM_CUDA_DRIVER=$STANDIN/libcuda.so.1 PYTFCOMM_NCCL_LIBRARY=$STANDIN/libnccl.so.2
fi

CPU_NPS=${CPU_NPS:-4 8 16}
CPU_SIZES=4K,64K,1M,16M
BIND=core
if [[ $REHEARSE == 1 ]]; then  # fewer cores than ranks here: no binding
  CPU_NPS=${CPU_NPS_REHEARSE:-4}
  CPU_SIZES=4K,64K
  BIND=none
fi
for n in $CPU_NPS; do
  (cd "$ROOT" && stage "cpu-$n" "${CPU_LIMIT:-28}" 12 "$PY" -m benchmarks.allreduce --np "$n" \
    --sizes "$CPU_SIZES" --backends pytfcomm,pytfcomm-tcp,mpi-shm,mpi-tcp,gloo --iters 5 \
    --warmup 2 --timeout $((${CPU_LIMIT:-28} / 5)) --bind-to "$BIND" --json "$OUT/cpu-$n.json" --quiet)
  rc=$?
  [[ $rc != 0 && $rc != 125 ]] && FAILED=1
done

say "end $(date -u +%FT%TZ), $(($(date +%s) - START)) s: $([[ $FAILED == 0 ]] && echo 'every stage that could run passed' || echo 'FAILURES, see the logs')"
rm -rf "$WORK"
exit $FAILED
