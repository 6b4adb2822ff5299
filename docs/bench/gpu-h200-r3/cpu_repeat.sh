#!/usr/bin/env bash
# Third H200 check, second call: issue 19's CPU rows on the GPU machine's 16 CPUs
# (ranks bound to cores, never more ranks than cores), five consecutive runs each.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
T0=$(date +%s)
mkdir -p "$OUT"
export CXX=/usr/bin/g++ CC=/usr/bin/gcc CMAKE_BUILD_PARALLEL_LEVEL=16
[[ -d /tmp/site/pytfcomm ]] || timeout -k 5 200 python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/site \
  --config-settings=cmake.define.PYTFCOMM_WITH_TF=OFF --config-settings=build-dir=/tmp/build . \
  >"$OUT/build.log" 2>&1
echo "build rc=$? at +$(( $(date +%s) - T0 )) s"
mkdir -p /tmp/w && cd /tmp/w
for r in 1 2 3 4 5; do
  for n in 2 4; do
    S=1M,2M,4M; [[ $n == 2 ]] && S=4M,64M
    PYTHONPATH=/tmp/site timeout -k 5 60 python3 "$ROOT/benchmarks/allreduce.py" --np $n \
      --backends pytfcomm,pytfcomm-tcp,mpi-shm,mpi-tcp --sizes $S --iters 20 --timeout 40 \
      --quiet --json "$OUT/np${n}_run$r.json" >"$OUT/np${n}_run$r.log" 2>&1
    echo "np=$n run $r rc=$? at +$(( $(date +%s) - T0 )) s"
  done
done
cat "$OUT"/np4_run1.log "$OUT"/np2_run1.log
# the device tool brings back at most 8 files: one archive
(cd "$OUT" && tar czf /tmp/runs.tgz np*_run*.* $(ls build.log 2>/dev/null) && rm -f np*_run*.* && mv /tmp/runs.tgz .)
