#!/bin/bash
# Round21's sitting, on the installed pytfcomm: tf_scatter over shared memory and TCP,
# then the before/after scripts against $1 (a `pip install --target` of 8b9c818).
# Writes next to this script: shm.txt/json, tcp.txt/json, hvd_ab.txt, allgather_ab.txt,
# grouped.txt. Run from the repository root with the venv's python as $PYTHON.
set -eu
old=$1
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python}
date -u
"$py" -m benchmarks.tf_scatter --np 2 --sizes 1M,4M,16M --iters 20 --rounds 3 \
  --json "$here/shm.json" 2>/dev/null | grep '^[|#]' > "$here/shm.txt"
PYTFCOMM_TRANSPORT=tcp "$py" -m benchmarks.tf_scatter --np 2 --sizes 1M,4M,16M --iters 20 \
  --rounds 3 --json "$here/tcp.json" 2>/dev/null | grep '^[|#]' > "$here/tcp.txt"
PYTHON=$py bash "$here/hvd_ab.sh" "$old" 3 hvd_ab.py > "$here/hvd_ab.txt"
PYTHON=$py bash "$here/hvd_ab.sh" "$old" 3 allgather_ab.py > "$here/allgather_ab.txt"
PYTHON=$py bash "$here/hvd_ab.sh" "$old" 3 grouped.py > "$here/grouped.txt"
date -u
