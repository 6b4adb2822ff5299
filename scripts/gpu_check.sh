#!/usr/bin/env bash
# Issue 17's GPU check in one command, for a machine with a GPU (docs/gpu.md).
#
#   scripts/gpu_check.sh [--wheel FILE] [--no-source-build] [--no-overhead] [--quick]
#
# 1. env      the machine: GPU, driver, CUDA, Python, PyTorch, CuPy, NCCL wheel.
# 2. install  pytfcomm into a fresh directory: the CUDA wheel given with --wheel
#             (scripts/build_wheels.sh --cuda, built elsewhere for this Python),
#             else built here from source with PYTFCOMM_WITH_CUDA=ON for this GPU.
# 3. info     python -m pytfcomm info from that install.
# 4. bench    benchmarks/nccl.py: pytfcomm's NCCL and staged paths against
#             torch.distributed's NCCL and a plain copy + CPU all-reduce, one run.
#             2 ranks on the one GPU when NCCL >= 2.30 (NCCL_MULTI_RANK_GPU_ENABLE=1),
#             else 1.
# 5. overhead benchmarks/gpu_overhead.py: one rank's per-call cost, pytfcomm
#             against raw NCCL (blocking and not) and torch.distributed
#             (--no-overhead leaves it out).
# 6. tests    pytest tests/gpu on the GPU (CuPy or PyTorch tensors): ranks 1-4 on
#             the one GPU, NCCL and staged.
# 7. source   with --wheel: also the build from source, into another directory,
#             and `info` from it (at low priority, beside the tests).
#
# Every stage has its own time limit and the next one runs whatever happened;
# logs and summary.txt go to $OUT (default ./gpu-check-out). Without a GPU
# (CI's machines, a laptop) the same command runs end to end: tests/gpu then
# runs on the CPU stand-ins of libcuda/libnccl, and the benchmark says why it
# cannot run. PYTHON names the interpreter (default python3); BENCH_LIMIT and
# TEST_LIMIT the seconds for the benchmark (300) and the tests (900). Exit
# status: 0 when every stage that could run passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-check-out}
PY=${PYTHON:-python3}
WHEEL=""
SOURCE_BUILD=1
OVERHEAD=1
QUICK=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --wheel) WHEEL=$(realpath "$2"); shift 2 ;;
    --no-source-build) SOURCE_BUILD=0; shift ;;
    --no-overhead) OVERHEAD=0; shift ;;
    --quick) QUICK=1; shift ;;
    *) echo "usage: $0 [--wheel FILE] [--no-source-build] [--no-overhead] [--quick]" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/gpu-check.XXXXXX)
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
FAILED=0
say() { echo "[gpu_check] $*" | tee -a "$SUMMARY"; }

# stage NAME SECONDS COMMAND...: runs COMMAND with a time limit, output to $OUT/NAME.log.
stage() {
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  timeout -k 10 "$limit" bash -c '"$@"' "$name" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  say "$name: rc=$rc in $(($(date +%s) - t0)) s (limit $limit s)$([[ $rc == 124 ]] && echo ', TIMED OUT')"
  return $rc
}

# shellcheck disable=SC2317  # run by stage()'s `bash -c` (export -f below)
cuda_arch() {  # compute capability of GPU 0 as CMake wants it (9.0 -> 90), or nothing
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .'
}

# shellcheck disable=SC2317  # run by stage()'s `bash -c` (export -f below)
env_report() {
  date -u
  uname -a
  echo "nproc: $(nproc)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.sm,clocks.mem \
    --format=csv 2>&1 || echo "nvidia-smi: not found"
  nvidia-smi topo -m 2>&1 | head -5
  nvcc --version 2>&1 | tail -2
  c++ --version 2>&1 | head -1
  env | grep -E '^(CC|CXX|CFLAGS|CXXFLAGS|LDFLAGS|CPPFLAGS|CMAKE_[A-Z_]*)=' || echo "no compiler flags in the environment"
  "$PY" -V
  "$PY" -m pip list 2>/dev/null | grep -iE '^(torch|cupy[a-z0-9-]*|nvidia-nccl[a-z0-9-]*|numpy|pytest|pytest-xdist|scikit.build.core|pybind11|ml.dtypes) '
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

# shellcheck disable=SC2317  # run by stage()'s `bash -c` (export -f below)
install_wheel() { "$PY" -m pip install -q --no-deps --no-index --target "$1" "$WHEEL"; }

# shellcheck disable=SC2317  # run by stage()'s `bash -c` (export -f below)
build_from_source() {  # $1: target directory
  local arch args=()
  arch=$(cuda_arch)
  [[ -n $arch ]] && args+=(--config-settings=cmake.define.PYTFCOMM_CUDA_ARCHS="$arch")
  PYTFCOMM_WITH_CUDA=ON "$PY" -m pip install -q --no-deps --no-build-isolation \
    --target "$1" --config-settings=cmake.define.PYTFCOMM_WITH_TF=OFF \
    --config-settings=build-dir="$WORK/build" "${args[@]}" "$ROOT"
}

info() { (cd "$WORK" && PYTHONPATH=$1 "$PY" -X faulthandler -m pytfcomm info); }

export PY WHEEL WORK ROOT
export NCCL_DEBUG=${NCCL_DEBUG:-WARN} PYTHONUNBUFFERED=1
export -f env_report install_wheel build_from_source info cuda_arch

say "start $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), python $PY"
stage env 60 env_report

SITE=$WORK/site
if [[ -n $WHEEL ]]; then
  stage install 120 install_wheel "$SITE" || FAILED=1
else
  stage install 600 build_from_source "$SITE" || FAILED=1
fi
export PYTHONPATH=$SITE

stage info 60 info "$SITE" || FAILED=1
NCCL=$(sed -n 's/^ *nccl_version *//p' "$OUT/info.log" | head -1)
GPUS=$(sed -n 's/^ *gpus *//p' "$OUT/info.log" | head -1)
say "GPUs seen by pytfcomm: ${GPUS:-?}; NCCL: ${NCCL:-none}"

NP=2
if [[ ${GPUS:-0} == 1 ]] && ! "$PY" -c "import sys; v = tuple(map(int, '${NCCL:-0}'.split('.'))); sys.exit(v < (2, 30))"; then
  NP=1  # NCCL < 2.30 cannot put two ranks on one GPU
fi

SIZES=4K,64K,1M,16M,64M,256M,1G
[[ $QUICK == 1 ]] && SIZES=4K,1M,64M
# benchmark NAME SECONDS SCRIPT ARGS...: exit 2 is "cannot run here" (no GPU, no
# PyTorch), said and not a failure; a row that failed prints "failed:".
benchmark() {
  local name=$1 limit=$2 script=$3
  shift 3
  (cd "$WORK" && stage "$name" "$limit" "$PY" "$ROOT/benchmarks/$script" "$@")
  case $? in
    0) grep -q "failed:" "$OUT/$name.log" && FAILED=1 ;;
    2) say "$name: could not run here ($(tail -1 "$OUT/$name.log"))" ;;
    *) FAILED=1 ;;
  esac
}

BENCH_LIMIT=${BENCH_LIMIT:-300}
benchmark bench "$BENCH_LIMIT" nccl.py --np "$NP" --sizes "$SIZES" --deadline $((BENCH_LIMIT - 20))
[[ $OVERHEAD == 1 ]] && benchmark overhead "${OVERHEAD_LIMIT:-180}" gpu_overhead.py

SRC_PID=""
if [[ -n $WHEEL && $SOURCE_BUILD == 1 ]]; then
  (
    log=$OUT/source_build.log
    c++ --version 2>&1 | head -1 >"$log"
    # shellcheck disable=SC2016  # $1 is the inner shell's argument, not expanded here
    nice -n 19 timeout -k 10 "${TEST_LIMIT:-900}" bash -c 'build_from_source "$1"' _ \
      "$WORK/src-site" >>"$log" 2>&1 && echo "--- info of the source build" >>"$log" &&
      info "$WORK/src-site" >>"$log" 2>&1
    rc=$?
    echo "--- libraries the source build needs" >>"$log"
    readelf -d "$WORK"/src-site/pytfcomm/*.so 2>&1 | grep -E "NEEDED|^File" >>"$log"
    if [[ $rc -gt 128 ]] && command -v cuda-gdb >/dev/null; then  # a crash: where
      echo "--- cuda-gdb backtrace" >>"$log"
      (cd "$WORK" && PYTHONPATH=$WORK/src-site timeout 120 cuda-gdb -batch -ex run -ex bt \
        --args "$PY" -m pytfcomm info) 2>&1 | grep -vE '^\[(New|Detaching|Thread)' | tail -40 >>"$log"
    fi
    echo "rc=$rc" >>"$log"
  ) &
  SRC_PID=$!
fi

ARGS=(-p no:cacheprovider -p no:benchmark -v -rs)  # pytest-benchmark warns under xdist
"$PY" -c "import xdist" 2>/dev/null && ARGS+=(-n 3)
if [[ ${GPUS:-0} -ge 1 ]]; then  # the stand-ins' own tests prove nothing about the GPU
  ARGS+=(--ignore=tests/gpu/test_standin_driver.py --ignore=tests/gpu/test_standin_nccl.py
    --ignore=tests/gpu/test_gpu_timeline.py)
fi
stage pytest "${TEST_LIMIT:-900}" "$PY" -P -m pytest "${ARGS[@]}" tests/gpu || FAILED=1

if [[ -n $SRC_PID ]]; then
  wait "$SRC_PID"
  say "source build: $(tail -1 "$OUT/source_build.log")"
  grep -q '^rc=0$' "$OUT/source_build.log" || FAILED=1
fi
say "end $(date -u +%FT%TZ): $([[ $FAILED == 0 ]] && echo 'every stage that could run passed' || echo 'FAILURES, see the logs')"
rm -rf "$WORK"
exit $FAILED
