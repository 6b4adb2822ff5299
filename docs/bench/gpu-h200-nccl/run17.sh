#!/usr/bin/env bash
# One-off for issue 17 (2026-11-27, fourth session): bring NCCL 2.32.3 (the
# project's nvidia-nccl-cu13 wheel, its fatbins pruned to sm_90 by
# scripts/prune_fatbin.py so it fits the carry limit) so that 2 ranks can share
# the one GPU (NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1); torch uses the
# same library. Then scripts/gpu_check.sh with the CUDA wheel built here.
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
mkdir -p "$OUT"
{
  python3 -c "
import lzma, shutil
with lzma.open('.whl/libnccl.so.2.xz') as f, open('/tmp/libnccl.so.2', 'wb') as g:
    shutil.copyfileobj(f, g)"
  sha256sum /tmp/libnccl.so.2
  D=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))")
  echo "torch's NCCL: $D"; ls -la "$D"
  cp -p "$D/libnccl.so.2" /tmp/libnccl.orig.so.2
  if cp /tmp/libnccl.so.2 "$D/libnccl.so.2"; then echo swapped; else
    echo "read-only: LD_PRELOAD instead"
    echo "export LD_PRELOAD=/tmp/libnccl.so.2 PYTFCOMM_NCCL_LIBRARY=/tmp/libnccl.so.2" >/tmp/nccl.env
  fi
  [[ -f /tmp/nccl.env ]] && source /tmp/nccl.env
  NCCL_MULTI_RANK_GPU_ENABLE=1 timeout 120 python3 .whl/sanity.py
  rc=$?; echo "sanity rc=$rc"
  if [[ $rc != 0 ]]; then cp /tmp/libnccl.orig.so.2 "$D/libnccl.so.2"; rm -f /tmp/nccl.env; echo "restored the machine's NCCL"; fi
  echo "swap took $(( $(date +%s) - T0 )) s"
} >"$OUT/nccl_swap.log" 2>&1
cat "$OUT/nccl_swap.log"
[[ -f /tmp/nccl.env ]] && source /tmp/nccl.env
WHL=.whl/pytfcomm-0.1.0-cp312-cp312-manylinux_2_35_x86_64.whl
python3 -m pip install -q --no-deps --no-index --target /tmp/sd-site "$WHL"
timeout -k 5 150 bash .whl/stream.sh /tmp/sd-site >"$OUT/stream_driver.log" 2>&1
echo "stream driver rc=$?"; grep -E "^(===|OK|FAIL|PASSED|FAILED|stream driver)" "$OUT/stream_driver.log"
OUT=$OUT BENCH_LIMIT=${BENCH_LIMIT:-170} TEST_LIMIT=${TEST_LIMIT:-200} bash scripts/gpu_check.sh \
  --wheel "$WHL" --no-source-build --no-overhead
echo "gpu_check rc=$? total $(( $(date +%s) - T0 )) s"
tail -40 "$OUT/pytest.log"
cat "$OUT/bench.log"
