#!/usr/bin/env bash
# Fifth H200 check, call 3: the staged path without its one-byte round (ead2ae8). (1) A/B
# in one call: this tree against the same tree with g.staged_carries_digest = false (the
# one-byte round before the chunks, as before ead2ae8), benchmarks/nccl.py's staged and
# copy + CPU ways at 4 KiB-1 MiB, alternating passes. (2) The GPU check at this tree.
# Packed into $OUT/r5c.tgz.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
R=/tmp/r5c
mkdir -p "$R" "$OUT"
T0=$(date +%s)
t() { echo "[run] $* at +$(($(date +%s) - T0)) s" | tee -a "$R/run.log"; }
pack() { tar -C /tmp -czf "$OUT/r5c.tgz" r5c; }
trap pack EXIT
python3 -c "
import lzma, shutil
with lzma.open('.whl/libnccl.so.2.xz') as f, open('/tmp/libnccl.so.2', 'wb') as g:
    shutil.copyfileobj(f, g)"
D=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))")
cp /tmp/libnccl.so.2 "$D/libnccl.so.2" && t "NCCL swapped into $D"
export CXX=/usr/bin/g++ CC=/usr/bin/gcc CMAKE_BUILD_PARALLEL_LEVEL=16
build() {  # build SRC WHEELDIR
  (cd "$1" && timeout -k 5 240 env PYTFCOMM_WITH_CUDA=ON python3 -m pip wheel -q --no-deps \
    --no-build-isolation -w "$2" --config-settings=cmake.define.PYTFCOMM_WITH_TF=OFF \
    --config-settings=cmake.define.PYTFCOMM_CUDA_ARCHS=90 \
    --config-settings=build-dir=/tmp/build-$(basename "$2") .) >>"$R/build.log" 2>&1
}
rm -rf /tmp/treeB && cp -a "$ROOT" /tmp/treeB && rm -rf /tmp/treeB/build /tmp/treeB/.whl
sed -i 's|  g.staged_carries_digest = true;|  g.staged_carries_digest = false;|' /tmp/treeB/csrc/gpu/gpu_comm.cc
grep -c "staged_carries_digest = false" /tmp/treeB/csrc/gpu/gpu_comm.cc >>"$R/build.log"
build "$ROOT" /tmp/whlA; t "build A (this tree) rc=$?"
build /tmp/treeB /tmp/whlB; t "build B (the one-byte round) rc=$?"
for v in A B; do
  python3 -m pip install -q --no-deps --no-index --target /tmp/site$v /tmp/whl$v/pytfcomm-*.whl
done
mkdir -p /tmp/w && cd /tmp/w
for pass in A1 B1 A2 B2 A3 B3; do
  PYTHONPATH=/tmp/site${pass:0:1} timeout -k 5 60 python3 "$ROOT/benchmarks/nccl.py" --np 2 \
    --sizes 4K,64K,1M --ways staged,copy --iters 100 --warmup 10 >"$R/ab_$pass.log" 2>&1
  t "nccl.py pass $pass rc=$?"
done
grep -h -E "^\| (4K|64K|1M) " "$R"/ab_*.log | head -40
cd "$ROOT"
OUT=$R/check BENCH_LIMIT=100 TEST_LIMIT=200 bash scripts/gpu_check.sh --wheel /tmp/whlA/pytfcomm-*.whl \
  --no-source-build --no-overhead
t "gpu_check rc=$?"
cat "$R/check/summary.txt"
grep -E "passed|failed" "$R/check/pytest.log" | tail -2
tail -10 "$R/check/bench.log"
