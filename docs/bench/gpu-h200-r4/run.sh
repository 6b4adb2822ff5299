#!/usr/bin/env bash
# Fourth H200 check (2026-11-29): where pytfcomm's extra 0.3-0.6 ms per NCCL call
# goes with 2 ranks on one GPU (overhead.py, three passes), then the GPU check at
# this commit (scripts/gpu_check.sh: info, benchmarks/nccl.py, tests/gpu). One
# call; everything is packed into $OUT/r4.tgz (the device tool returns 8 files).
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
R=/tmp/r4
mkdir -p "$R" "$OUT"
T0=$(date +%s)
t() { echo "[run] $* at +$(($(date +%s) - T0)) s" | tee -a "$R/run.log"; }
pack() { tar -C /tmp -czf "$OUT/r4.tgz" r4; }
trap pack EXIT
nvidia-smi >"$R/nvidia-smi.log" 2>&1
# 1. NCCL 2.32.3 (the project's nvidia-nccl-cu13 wheel, sm_90 only, xz) in place of
#    PyTorch's, so both sides run the same NCCL and two ranks may share the GPU.
python3 -c "
import lzma, shutil
with lzma.open('.whl/libnccl.so.2.xz') as f, open('/tmp/libnccl.so.2', 'wb') as g:
    shutil.copyfileobj(f, g)"
D=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))")
cp /tmp/libnccl.so.2 "$D/libnccl.so.2" && t "NCCL swapped into $D"
# 2. A CUDA wheel built here from the working tree (a compiler with a shared libstdc++).
export CXX=/usr/bin/g++ CC=/usr/bin/gcc CMAKE_BUILD_PARALLEL_LEVEL=16
timeout -k 5 240 env PYTFCOMM_WITH_CUDA=ON python3 -m pip wheel -q --no-deps --no-build-isolation \
  -w /tmp/whl --config-settings=cmake.define.PYTFCOMM_WITH_TF=OFF \
  --config-settings=cmake.define.PYTFCOMM_CUDA_ARCHS=90 \
  --config-settings=build-dir=/tmp/build . >"$R/build.log" 2>&1
t "wheel build rc=$?"
WHL=$(ls /tmp/whl/pytfcomm-*.whl | head -1)
python3 -m pip install -q --no-deps --no-index --target /tmp/site "$WHL"
# 3. The overhead probe: verify on and off with the timeline, verify on without it.
mkdir -p /tmp/w && cd /tmp/w
P=$ROOT/docs/bench/gpu-h200-r4
for pass in v1_tl v0_tl v1; do
  v=${pass:1:1}
  tl=$([[ $pass == *_tl ]] && echo --timeline)
  PYTHONPATH=/tmp/site PYTFCOMM_GPU_VERIFY=$v NCCL_DEBUG=WARN timeout -k 5 100 \
    python3 "$P/overhead.py" --out "$R/$pass" $tl >"$R/$pass.log" 2>&1
  t "overhead $pass rc=$?"
done
python3 "$P/overhead_report.py" "$R/v1_tl" "$R/v0_tl" "$R/v1" | tee "$R/overhead.txt"
# 4. The GPU check at this commit.
cd "$ROOT"
OUT=$R/check BENCH_LIMIT=100 TEST_LIMIT=170 bash scripts/gpu_check.sh --wheel "$WHL" \
  --no-source-build --no-overhead
t "gpu_check rc=$?"
cat "$R/check/summary.txt"
grep -E "passed|failed" "$R/check/pytest.log" | tail -3
tail -12 "$R/check/bench.log"
