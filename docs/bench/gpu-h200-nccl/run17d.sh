#!/usr/bin/env bash
# One-off: poll.py with the host verification round on and off.
set -u
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
python3 -c "
import lzma, shutil
with lzma.open('.whl/libnccl.so.2.xz') as f, open('/tmp/libnccl.so.2', 'wb') as g:
    shutil.copyfileobj(f, g)"
D=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))")
cp /tmp/libnccl.so.2 "$D/libnccl.so.2"
python3 -m pip install -q --no-deps --no-index --target /tmp/site .whl/pytfcomm-0.1.0-cp312-cp312-manylinux_2_35_x86_64.whl
for v in 1 0 1 0; do
  echo "=== PYTFCOMM_GPU_VERIFY=$v"
  (cd /tmp && PYTHONPATH=/tmp/site PYTFCOMM_GPU_VERIFY=$v NCCL_DEBUG=WARN timeout -k 5 100 python3 "$OLDPWD/.whl/poll.py" 2>&1 | grep -E "KiB|Error|error")
done 2>&1 | tee "$OUT/poll.log"
