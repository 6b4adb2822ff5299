# Sourced by a before/after sitting (round9, round12) after it sets O (its output folder)
# and BASE_COMMIT: installs BASE_COMMIT's pytfcomm with pip --target into $BASE (once; a
# temporary worktree), clears $O, and sets AR, the allreduce benchmark that runs every
# pytfcomm backend NAME from this checkout's installed build and, as NAME@base, from $BASE.
PY=.venv/bin/python
BASE=${BASE:-/tmp/pytfcomm-base-$BASE_COMMIT}
if [ ! -d "$BASE/pytfcomm" ]; then
  WT=$(mktemp -d)/base
  git worktree add --detach "$WT" "$BASE_COMMIT"
  $PY -m pip install -q --no-deps --no-build-isolation --target "$BASE" "$WT"
  git worktree remove --force "$WT"
fi
rm -f "$O"/*.txt "$O"/*.json
AR="$PY -m benchmarks.allreduce --quiet --baseline $BASE"
echo "start $(date -u '+%F %T') UTC, commit $(git rev-parse --short HEAD), base $BASE_COMMIT" > "$O"/sitting.txt
