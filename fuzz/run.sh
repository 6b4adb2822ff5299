#!/usr/bin/env bash
# Build the wire-protocol fuzz target with clang's libFuzzer (+ ASan/UBSan)
# and run it. Usage: fuzz/run.sh [seconds=30] [extra libFuzzer flags...]
# CI runs 30 s (scripts/test.sh); for a long run, e.g. an hour on all cores:
#   fuzz/run.sh 3600 -jobs=$(nproc) -workers=$(nproc)
# Needs clang and libclang-rt (Debian: apt-get install clang libclang-rt-14-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-30}
shift || true
OUT=${PYTFCOMM_FUZZ_DIR:-build/fuzz}
CXX=${FUZZ_CXX:-clang++}
mkdir -p "$OUT/corpus"
SRC=(fuzz/fuzz_wire.cc csrc/transport/wire_check.cc csrc/common/sha256.cc
     csrc/transport/tcp/handshake.cc csrc/transport/net/socket.cc
     csrc/common/logging.cc csrc/common/param.cc csrc/common/interrupt.cc
     csrc/engine/round_record.cc csrc/engine/agreed_cache.cc csrc/transport/host/bundle.cc)
"$CXX" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Icsrc "${SRC[@]}" -o "$OUT/fuzz_wire" -lpthread
# Seeds: one valid hello per session mode, so the fuzzer starts past the magic.
python3 fuzz/seeds.py "$OUT/corpus"
PYTFCOMM_LOG_LEVEL=0 "$OUT/fuzz_wire" "$OUT/corpus" -max_total_time="$SECONDS_TO_RUN" \
  -max_len=4096 -print_final_stats=1 -artifact_prefix="$OUT/" "$@" 2>&1 | tee "$OUT/last_run.log" | grep -E "^(#|stat::|==|INFO: -max)" | tail -20
