#!/usr/bin/env bash
# One-off for issue 17, second call: as run17.sh, plus the stream driver with
# PYTFCOMM_NCCL_LIBRARY (no Python there, so the loader path's NCCL was taken),
# and benchmarks/nccl.py with the host verification round on and off (A B A).
set -u
cd "$(dirname "$0")/.."; ROOT=$PWD
T0=$(date +%s)
mkdir -p "$OUT"
EXTRA=$OUT/extra.log
{
  python3 -c "
import lzma, shutil
with lzma.open('.whl/libnccl.so.2.xz') as f, open('/tmp/libnccl.so.2', 'wb') as g:
    shutil.copyfileobj(f, g)"
  D=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))")
  cp /tmp/libnccl.so.2 "$D/libnccl.so.2" && echo "swapped $D/libnccl.so.2"
  echo "NCCL libraries on the loader path:"; ldconfig -p | grep -i nccl
  find / -xdev -name 'libnccl.so*' 2>/dev/null | grep -v "^/proc" | head
  WHL=.whl/pytfcomm-0.1.0-cp312-cp312-manylinux_2_35_x86_64.whl
  python3 -m pip install -q --no-deps --no-index --target /tmp/sd-site "$WHL"
  PYTFCOMM_NCCL_LIBRARY=$D/libnccl.so.2 timeout -k 5 150 bash .whl/stream.sh /tmp/sd-site
  echo "stream driver rc=$?"
} >"$EXTRA" 2>&1
grep -E "^(===|FAIL|PASSED|FAILED|stream driver|swapped)|nccl" "$EXTRA" | head -60
export PYTHONPATH=/tmp/sd-site
for v in 1 0 1; do
  echo "=== PYTFCOMM_GPU_VERIFY=$v"
  (cd /tmp && PYTFCOMM_GPU_VERIFY=$v NCCL_DEBUG=WARN timeout -k 5 80 python3 "$ROOT/benchmarks/nccl.py" \
    --np 2 --sizes 4K,1M,64M,256M,1G,2G --ways torch,nccl --iters 20 --deadline 70 2>&1 | grep -v "WARN\|Guessing\|barrier\|return func\|^$")
done >"$OUT/ab.log" 2>&1
unset PYTHONPATH
cat "$OUT/ab.log"
OUT=$OUT BENCH_LIMIT=170 TEST_LIMIT=200 bash scripts/gpu_check.sh --wheel "$WHL" --no-source-build --no-overhead
echo "gpu_check rc=$? total $(( $(date +%s) - T0 )) s"
grep -E "SKIPPED \[|passed|failed|FAILED" "$OUT/pytest.log"
tail -12 "$OUT/bench.log"
