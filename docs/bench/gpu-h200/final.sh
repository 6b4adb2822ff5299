#!/usr/bin/env bash
# One-off: the /opt/gcc toolchain and the source build, with the runtime check.
cd "$(dirname "$0")/.."
echo "CXX=$CXX"; /opt/gcc/bin/g++ --version | head -1
ls /opt/gcc/lib64 /opt/gcc/lib 2>/dev/null | grep -i "stdc" | tr '\n' ' '; echo
echo "print-file-name: $(/opt/gcc/bin/g++ -print-file-name=libstdc++.so) $(/opt/gcc/bin/g++ -print-file-name=libstdc++.a)"
pipi() { python3 -m pip install -q --no-deps --no-build-isolation -C cmake.define.PYTFCOMM_WITH_TF=OFF "$@" .; }
( pipi --target /tmp/sa -C build-dir=/tmp/ba >/tmp/a.log 2>&1; echo "A (default CXX, CPU) rc=$?"
  grep -A7 "CMake Error" /tmp/a.log | head -9 ) >/tmp/A.out 2>&1 &
( CXX=/usr/bin/g++ CC=/usr/bin/gcc PYTFCOMM_WITH_CUDA=ON pipi --target /tmp/sb -C build-dir=/tmp/bb \
    -C cmake.define.PYTFCOMM_CUDA_ARCHS=90 >/tmp/b.log 2>&1; echo "B (CXX=/usr/bin/g++, CUDA) rc=$?"; tail -3 /tmp/b.log
  readelf -d /tmp/sb/pytfcomm/libpytfcomm_core.so | grep NEEDED
  cd /tmp && PYTHONPATH=/tmp/sb timeout 60 python3 -m pytfcomm info | grep -E "^compiler|cuda_build|gpus|nccl_version"; echo "info rc=${PIPESTATUS[0]}"
  PYTHONPATH=/tmp/sb timeout 60 python3 -c "
import socket, torch, pytfcomm
s = socket.socket(); s.bind(('127.0.0.1', 0)); p = s.getsockname()[1]; s.close()
c = pytfcomm.init(rank=0, size=1, addr=f'127.0.0.1:{p}')
x = torch.arange(1 << 20, dtype=torch.float32, device='cuda')
y = c.allreduce(x)
print('smoke allreduce', c._gpu.last_backend(), bool(torch.equal(x, y)))
" ) >/tmp/B.out 2>&1 &
wait; cat /tmp/A.out /tmp/B.out
