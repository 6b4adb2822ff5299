#!/bin/bash
# Round18, one sitting: the sequence probe, the benchmark A/B (old sequence vs new), the fit
# breakdown (5 runs), then issue 19's rows with round16's commands exactly (outputs in
# docs/bench/round18/issue/). Times in sitting.txt.
set -u
cd "$(dirname "$0")"
R=$(git rev-parse --show-toplevel)
PY=$R/.venv/bin/python
stamp() { echo "$1 $(date -u '+%F %T') UTC" >> sitting.txt; }
echo "start $(date -u '+%F %T') UTC $(lscpu | grep 'Model name' | tr -s ' ') $(git rev-parse --short HEAD)" > sitting.txt
bash sequence.sh > sequence.txt 2>&1
stamp "sequence done"
bash ab_bench.sh > ab_bench.txt 2>&1
stamp "ab_bench done"
(cd "$R" && $PY -m benchmarks.fit_breakdown --repeat 5 --json docs/bench/round18/fit_breakdown.json) \
  > fit_breakdown.txt 2> fit_breakdown.err
stamp "fit_breakdown done"
mkdir -p issue
(cd "$R" && sed -e 's|docs/bench/round16|docs/bench/round18/issue|g' -e '/^cd /d' \
  docs/bench/round16/sitting.sh | bash)
stamp "end"
