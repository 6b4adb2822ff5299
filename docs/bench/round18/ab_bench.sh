#!/bin/bash
# Round18 A/B of the benchmark, not of pytfcomm: tf_multiworker as of OLD (default 221a72d:
# the strategy's 16 MiB calls without the NumPy all-reduce and identity the Horovod-style
# row has) against this checkout's (the same sequence on every backend), alternating, PASSES
# passes each, both pytfcomm backends, the same installed pytfcomm. Outputs in $D (ab_bench/).
set -u
cd "$(dirname "$0")"
ROOT=$(git rev-parse --show-toplevel)
PY=${PY:-$ROOT/.venv/bin/python}
OLD=${OLD:-221a72d} PASSES=${PASSES:-3}
old=$(mktemp -d /tmp/ptc-round18-old-XXXX)
trap 'rm -rf "$old"' EXIT
git -C "$ROOT" archive "$OLD" benchmarks | tar -x -C "$old"
D=${D:-ab_bench}  # where the outputs go
mkdir -p "$D"
for i in $(seq 1 "$PASSES"); do
  order="old new"; [ $((i % 2)) = 0 ] && order="new old"
  for which in $order; do
    dir=$ROOT; [ "$which" = old ] && dir=$old
    echo "pass $i $which $(date -u +%T)"
    (cd "$dir" && "$PY" -m benchmarks.tf_multiworker --np 2 \
      --backends pytfcomm-mwms,pytfcomm-horovod) > "$D/$which-$i.txt" 2>&1
  done
done
for f in "$D"/*.txt; do
  echo "$f: $(grep -E '^\| pytfcomm-(mwms|horovod) \|' "$f" | cut -d'|' -f2,3 | tr -s ' ' | tr '\n' ' ')"
done
