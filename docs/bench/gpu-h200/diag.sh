#!/usr/bin/env bash
# One-off: why does a source build made with the device's GCC 13 crash in param_table()?
cd "$(dirname "$0")/.."
ROOT=$PWD
PYB=$(python3 -c "import pybind11; print(pybind11.get_cmake_dir())")
c++ --version | head -1
dpkg -l | grep -E "libstdc\+\+6|^ii  g\+\+ " | awk '{print $2, $3}'
build() {  # name cuda sanitize
  cmake -S "$ROOT" -B /tmp/b-$1 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPYTFCOMM_WITH_CUDA=$2 \
    -DPYTFCOMM_SANITIZE=$3 -DPYTFCOMM_CUDA_ARCHS=90 -DPYTFCOMM_WITH_TF=OFF -Dpybind11_DIR="$PYB" \
    -DPython_EXECUTABLE="$(command -v python3)" >/tmp/cfg-$1.log 2>&1 &&
    cmake --build /tmp/b-$1 -j 6 --target _core >>/tmp/cfg-$1.log 2>&1
  echo "build $1 rc=$?"
  mkdir -p /tmp/p-$1 && cp -r "$ROOT/pytfcomm" /tmp/p-$1/ &&
    find /tmp/b-$1 -maxdepth 3 \( -name '_core*.so' -o -name 'libpytfcomm_core.so' \) -exec cp {} /tmp/p-$1/pytfcomm/ \;
}
build cpu OFF OFF & build cuda ON OFF & build asan OFF ON & wait
for v in cpu cuda; do
  echo "=== info $v"
  (cd /tmp && PYTHONPATH=/tmp/p-$v timeout 60 python3 -X faulthandler -m pytfcomm info 2>&1 | grep -v "^  PYTFCOMM" | tail -8; echo "rc=${PIPESTATUS[0]}")
done
echo "=== cuda-gdb cpu"
(cd /tmp && PYTHONPATH=/tmp/p-cpu timeout 120 cuda-gdb -batch -ex run -ex bt -ex "info registers rip rsp" -ex "x/6i \$pc-12" --args python3 -m pytfcomm info 2>&1 | grep -vE '^\[(New|Detaching|Thread)' | tail -45)
echo "=== asan"
(cd /tmp && LD_PRELOAD=$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so) ASAN_OPTIONS=detect_leaks=0 PYTHONPATH=/tmp/p-asan timeout 120 python3 -m pytfcomm info 2>&1 | grep -v "^  PYTFCOMM" | tail -40)
echo "=== nm"
nm -C --defined-only /tmp/p-cpu/pytfcomm/libpytfcomm_core.so | grep -E "_M_insert|codecvt|num_put" | head
tail -5 /tmp/cfg-asan.log
echo "=== where the per-call time goes (wheel, 1 rank, 4 KiB, torch)"
python3 -m pip install -q --no-deps --no-index --target /tmp/site .whl/pytfcomm-*.whl
cd /tmp && PYTHONPATH=/tmp/site timeout 120 python3 - <<'PY'
import time, statistics, socket, torch, pytfcomm
from pytfcomm import _dlpack
from pytfcomm._core import GpuCommunicator  # noqa
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
comm = pytfcomm.init(rank=0, size=1, addr=f"127.0.0.1:{port}")
x = torch.ones(1024, device="cuda")
comm.allreduce(x, out=x)
gpu = comm.gpu_communicator()
st = torch.cuda.Stream().cuda_stream
def t(name, fn, n=3000):
    for _ in range(300): fn()
    v = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); v.append(time.perf_counter() - t0)
    print(f"{name:40s} {statistics.median(v)*1e6:8.1f} us")
t("comm.allreduce(x, out=x)", lambda: comm.allreduce(x, out=x))
t("core gpu.allreduce direct", lambda: gpu.allreduce(x, x, 0, 0, comm.gpu_backend, 600.0, 0))
t("x.__dlpack__(stream=ptc)", lambda: x.__dlpack__(stream=st))
t("x.__dlpack__()", lambda: x.__dlpack__())
t("torch.cuda.synchronize()", torch.cuda.synchronize)
t("python checks only", lambda: (_dlpack.is_dlpack(x), _dlpack._is_cuda(x, "i"), _dlpack._is_cuda(x, "o"), _dlpack._shape(x)))
PY
