#!/bin/bash
# Round19: round18's slow case (the per-call reduce right after the chain of 8, SEQ=reduce,graph)
# with rank 0's timeline on and its core sampled by perf (cpu-clock, 10 kHz, CLOCK_MONOTONIC
# timestamps, kernel included: run as root or with perf_event_paranoid <= 1). perf_split.py
# then says what that core did during each reduce-scatter phase, per-call reduce against the
# chain's. 20 iterations; three passes of each pytfcomm path. Output: copy_profile.txt.
set -u
cd "$(dirname "$0")"
PY=${PY:-../../../.venv/bin/python}
R18=../round18
T=$(mktemp -d /tmp/ptc-round19-perf-XXXX)
trap 'rm -rf "$T"' EXIT
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1 ITERS=20 SEQ=reduce,graph
date -u +%F' '%T' UTC'
for pass in 1 2 3; do
  for b in mwms hvd; do
    ports=$($PY -c "import socket
s = [socket.socket() for _ in range(3)]
[x.bind(('127.0.0.1', 0)) for x in s]
print(' '.join(str(x.getsockname()[1]) for x in s))")
    tl="$T/$pass-$b-%r.json"
    PYTFCOMM_TIMELINE=$tl timeout 180 taskset -c 0 perf record -q -k mono -e cpu-clock -F 10000 \
      -o "$T/$pass-$b.perf" $PY $R18/sequence.py 0 $ports $b >"$T/out0" 2>/dev/null &
    PYTFCOMM_TIMELINE=$tl timeout 180 taskset -c 1 $PY $R18/sequence.py 1 $ports $b >/dev/null 2>&1
    wait
    echo "pass $pass: $(cat "$T/out0")"
    (cd /tmp && "$OLDPWD/$PY" "$OLDPWD/perf_split.py" "$T/$pass-$b-0.json" "$T/$pass-$b.perf") 2>&1
  done
done
date -u +%F' '%T' UTC'
