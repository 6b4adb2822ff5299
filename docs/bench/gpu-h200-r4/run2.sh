#!/usr/bin/env bash
# Fourth H200 check, call 2: the same probe with more ways (raw NCCL through ctypes on
# a blocking and on a non-blocking communicator, the DLPack hand-off alone, CuPy, and
# back-to-back calls), verification on and off. Packed into $OUT/r4b.tgz.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
R=/tmp/r4b
mkdir -p "$R" "$OUT"
T0=$(date +%s)
t() { echo "[run] $* at +$(($(date +%s) - T0)) s" | tee -a "$R/run.log"; }
pack() { tar -C /tmp -czf "$OUT/r4b.tgz" r4b; }
trap pack EXIT
python3 -c "
import lzma, shutil
with lzma.open('.whl/libnccl.so.2.xz') as f, open('/tmp/libnccl.so.2', 'wb') as g:
    shutil.copyfileobj(f, g)"
D=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))")
cp /tmp/libnccl.so.2 "$D/libnccl.so.2" && t "NCCL swapped into $D"
export CXX=/usr/bin/g++ CC=/usr/bin/gcc CMAKE_BUILD_PARALLEL_LEVEL=16
timeout -k 5 240 env PYTFCOMM_WITH_CUDA=ON python3 -m pip install -q --no-deps --no-build-isolation \
  --target /tmp/site --config-settings=cmake.define.PYTFCOMM_WITH_TF=OFF \
  --config-settings=cmake.define.PYTFCOMM_CUDA_ARCHS=90 \
  --config-settings=build-dir=/tmp/build . >"$R/build.log" 2>&1
t "build rc=$?"
mkdir -p /tmp/w && cd /tmp/w
P=$ROOT/docs/bench/gpu-h200-r4
W=torch,raw_b,raw_nb,pytfcomm,torch_b2b,pytfcomm_b2b,dlpack,cupy
for pass in v1_tl v0_tl; do
  PYTHONPATH=/tmp/site PYTFCOMM_GPU_VERIFY=${pass:1:1} NCCL_DEBUG=WARN timeout -k 5 150 \
    python3 "$P/overhead.py" --out "$R/$pass" --timeline --ways $W >"$R/$pass.log" 2>&1
  t "overhead $pass rc=$?"
done
python3 "$P/overhead_report.py" "$R/v1_tl" "$R/v0_tl" | tee "$R/overhead.txt"
tail -n 5 "$R"/v*.log
