#!/usr/bin/env bash
# Fifth H200 check (2026-11-30): pytfcomm's NCCL path on the tensor library's current
# stream. (1) The overhead probe, A/B in one call: the new default against pytfcomm's
# own stream (PTC_OWN_STREAM=1), alternating passes, verification on and off.
# (2) The GPU check at this tree (scripts/gpu_check.sh: info, benchmarks/nccl.py,
# tests/gpu with PyTorch/CuPy tensors). Everything is packed into $OUT/r5.tgz.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
R=/tmp/r5
mkdir -p "$R" "$OUT"
T0=$(date +%s)
t() { echo "[run] $* at +$(($(date +%s) - T0)) s" | tee -a "$R/run.log"; }
pack() { tar -C /tmp -czf "$OUT/r5.tgz" r5; }
trap pack EXIT
nvidia-smi >"$R/nvidia-smi.log" 2>&1
# NCCL 2.32.3 (the project's nvidia-nccl-cu13 wheel, sm_90 only, xz) in place of
# PyTorch's, so every way runs the same NCCL and two ranks may share the GPU.
python3 -c "
import lzma, shutil
with lzma.open('.whl/libnccl.so.2.xz') as f, open('/tmp/libnccl.so.2', 'wb') as g:
    shutil.copyfileobj(f, g)"
D=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))")
cp /tmp/libnccl.so.2 "$D/libnccl.so.2" && t "NCCL swapped into $D"
export CXX=/usr/bin/g++ CC=/usr/bin/gcc CMAKE_BUILD_PARALLEL_LEVEL=16
timeout -k 5 240 env PYTFCOMM_WITH_CUDA=ON python3 -m pip wheel -q --no-deps --no-build-isolation \
  -w /tmp/whl --config-settings=cmake.define.PYTFCOMM_WITH_TF=OFF \
  --config-settings=cmake.define.PYTFCOMM_CUDA_ARCHS=90 \
  --config-settings=build-dir=/tmp/build . >"$R/build.log" 2>&1
t "wheel build rc=$?"
WHL=$(ls /tmp/whl/pytfcomm-*.whl | head -1)
python3 -m pip install -q --no-deps --no-index --target /tmp/site "$WHL"
mkdir -p /tmp/w && cd /tmp/w
P=$ROOT/docs/bench/gpu-h200-r5
W=torch,raw_nb,pytfcomm,cupy,dlpack
for pass in v1_new_a v1_own_a v0_new_a v0_own_a v1_new_b v1_own_b v0_new_b v0_own_b; do
  v=${pass:1:1}
  own=$([[ $pass == *_own_* ]] && echo 1 || echo 0)
  PYTHONPATH=/tmp/site PYTFCOMM_GPU_VERIFY=$v PTC_OWN_STREAM=$own NCCL_DEBUG=WARN \
    timeout -k 5 90 python3 "$P/overhead_ab.py" --out "$R/$pass" --timeline --iters 30 \
    --ways $W >"$R/$pass.log" 2>&1
  t "overhead $pass rc=$?"
done
python3 "$ROOT/docs/bench/gpu-h200-r4/overhead_report.py" "$R"/v1_new_a "$R"/v1_own_a \
  "$R"/v1_new_b "$R"/v1_own_b "$R"/v0_new_a "$R"/v0_own_a "$R"/v0_new_b "$R"/v0_own_b \
  >"$R/overhead.txt" 2>&1
t "report rc=$?"
cd "$ROOT"
OUT=$R/check BENCH_LIMIT=100 TEST_LIMIT=200 bash scripts/gpu_check.sh --wheel "$WHL" \
  --no-source-build --no-overhead
t "gpu_check rc=$?"
cat "$R/check/summary.txt"
grep -E "passed|failed" "$R/check/pytest.log" | tail -3
tail -12 "$R/check/bench.log"
grep -E "65536 KiB \| (pytfcomm|torch|raw_nb|cupy) " "$R/overhead.txt"
