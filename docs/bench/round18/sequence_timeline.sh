#!/bin/bash
# Round18: sequence.sh's first two cases (no barrier) with each rank's timeline on, 20
# iterations, two passes; then sequence_timeline.py splits the per-call reduce's time inside
# pytfcomm. Outputs: sequence_timeline.txt (timelines in a temp dir, not kept).
set -u
cd "$(dirname "$0")"
PY=${PY:-../../../.venv/bin/python}
T=$(mktemp -d /tmp/ptc-round18-tl-XXXX)
trap 'rm -rf "$T"' EXIT
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1 ITERS=20
date -u +%F' '%T' UTC'
for pass in 1 2; do
  for b in mwms hvd; do
    for seq in reduce,graph reduce,graph,numpy,tfcall; do
      ports=$($PY -c "import socket
s = [socket.socket() for _ in range(3)]
[x.bind(('127.0.0.1', 0)) for x in s]
print(' '.join(str(x.getsockname()[1]) for x in s))")
      tl="$T/$pass-$b-${seq//,/+}-%r.json"
      PYTFCOMM_TIMELINE=$tl SEQ=$seq timeout 120 taskset -c 0 $PY sequence.py 0 $ports $b 2>/dev/null &
      PYTFCOMM_TIMELINE=$tl SEQ=$seq timeout 120 taskset -c 1 $PY sequence.py 1 $ports $b >/dev/null 2>&1
      wait
    done
  done
done
echo "span inside pytfcomm and its two phases, medians in us:"
(cd /tmp && "$OLDPWD/$PY" "$OLDPWD/sequence_timeline.py" "$T") 2>/dev/null
date -u +%F' '%T' UTC'
