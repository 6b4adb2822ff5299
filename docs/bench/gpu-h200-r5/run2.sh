#!/usr/bin/env bash
# Fifth H200 check, call 2: the GPU check (scripts/gpu_check.sh: info,
# benchmarks/nccl.py, tests/gpu with CuPy tensors) at the tree that went back to
# pytfcomm's own stream, with the test of the producer's pending work. Packed into
# $OUT/r5b.tgz.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
R=/tmp/r5b
mkdir -p "$R" "$OUT"
T0=$(date +%s)
t() { echo "[run] $* at +$(($(date +%s) - T0)) s" | tee -a "$R/run.log"; }
pack() { tar -C /tmp -czf "$OUT/r5b.tgz" r5b; }
trap pack EXIT
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
OUT=$R/check BENCH_LIMIT=100 TEST_LIMIT=200 bash scripts/gpu_check.sh --wheel "$WHL" \
  --no-source-build --no-overhead
t "gpu_check rc=$?"
cat "$R/check/summary.txt"
grep -E "passed|failed" "$R/check/pytest.log" | tail -3
grep -E "producers" "$R/check/pytest.log" | head -8
tail -12 "$R/check/bench.log"
