#!/usr/bin/env bash
# One-off for issue 17, third call: the wheel with init() naming the NCCL wheel
# (the loader path's NCCL 2.28.3 had been taken by a pytest worker); gpu_check again.
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
mkdir -p "$OUT"
python3 -c "
import lzma, shutil
with lzma.open('.whl/libnccl.so.2.xz') as f, open('/tmp/libnccl.so.2', 'wb') as g:
    shutil.copyfileobj(f, g)"
D=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))")
cp /tmp/libnccl.so.2 "$D/libnccl.so.2" && echo "swapped $D/libnccl.so.2 in $(( $(date +%s) - T0 )) s"
WHL=.whl/pytfcomm-0.1.0-cp312-cp312-manylinux_2_35_x86_64.whl
OUT=$OUT BENCH_LIMIT=170 TEST_LIMIT=200 bash scripts/gpu_check.sh --wheel "$WHL" --no-source-build --no-overhead
echo "gpu_check rc=$? total $(( $(date +%s) - T0 )) s"
grep -E "SKIPPED \[|passed|failed|FAILED|nccl_wheel" "$OUT/pytest.log"
tail -12 "$OUT/bench.log"
