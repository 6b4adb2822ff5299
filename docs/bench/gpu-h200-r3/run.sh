#!/usr/bin/env bash
# Third H200 check (2026-11-28): the GPU paths at this commit (halving-doubling,
# protocol 7, rank binding), and the CPU all-reduce on a host with more cores than
# ranks (16 CPUs) against torch Gloo. One call; logs under $OUT.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
T0=$(date +%s)
mkdir -p "$OUT"
t() { echo "[run] $* at +$(( $(date +%s) - T0 )) s" | tee -a "$OUT/run.log"; }
# 1. NCCL 2.32.3 (the project's nvidia-nccl-cu13 wheel, sm_90 only, xz) in place of
#    PyTorch's 2.28.9, so both sides run the same NCCL and two ranks may share the GPU.
python3 -c "
import lzma, shutil
with lzma.open('.whl/libnccl.so.2.xz') as f, open('/tmp/libnccl.so.2', 'wb') as g:
    shutil.copyfileobj(f, g)"
D=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))")
cp /tmp/libnccl.so.2 "$D/libnccl.so.2" && t "NCCL swapped into $D"
# 2. One CUDA build from source (a compiler with a shared libstdc++), as a wheel.
export CXX=/usr/bin/g++ CC=/usr/bin/gcc CMAKE_BUILD_PARALLEL_LEVEL=16
timeout -k 5 240 env PYTFCOMM_WITH_CUDA=ON python3 -m pip wheel -q --no-deps --no-build-isolation \
  -w /tmp/whl --config-settings=cmake.define.PYTFCOMM_WITH_TF=OFF \
  --config-settings=cmake.define.PYTFCOMM_CUDA_ARCHS=90 \
  --config-settings=build-dir=/tmp/build . >"$OUT/build.log" 2>&1
t "wheel build rc=$?"
WHL=$(ls /tmp/whl/pytfcomm-*.whl | head -1)
# 3. The GPU check: info, benchmarks/nccl.py (2 ranks), tests/gpu.
OUT=$OUT/check BENCH_LIMIT=100 TEST_LIMIT=170 bash scripts/gpu_check.sh --wheel "$WHL" \
  --no-source-build --no-overhead
t "gpu_check rc=$?"
# 4. CPU all-reduce, ranks bound to cores, N=4 and 8 on 16 CPUs.
python3 -m pip install -q --no-deps --no-index --target /tmp/site "$WHL"
mkdir -p /tmp/w && cd /tmp/w
B=pytfcomm,pytfcomm-tcp,gloo
command -v mpirun >/dev/null && B=$B,mpi-shm,mpi-tcp
for n in 4 8; do
  PYTHONPATH=/tmp/site timeout -k 5 80 python3 "$ROOT/benchmarks/allreduce.py" --np $n \
    --backends $B --sizes 64K,1M,2M,4M,16M --iters 20 --timeout 60 --quiet \
    --json "$OUT/cpu_np$n.json" >"$OUT/cpu_np$n.log" 2>&1
  t "cpu bench np=$n rc=$?"
done
lscpu | head -20 >"$OUT/lscpu.log"
cat "$OUT/check/summary.txt"; grep -E "passed|failed" "$OUT/check/pytest.log" | tail -3
tail -14 "$OUT/check/bench.log"; cat "$OUT"/cpu_np*.log
