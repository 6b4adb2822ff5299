#!/usr/bin/env bash
# Set everything up, then run the whole test suite: C++ unit tests (ranks as
# threads, plus the same under AddressSanitizer/UBSan when PYTFCOMM_SANITIZE
# is not 0), lint/format checks, and the Python suite (multi-process on
# 127.0.0.1). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${PYTFCOMM_VENV:-$PWD/.venv}
VPY="$VENV/bin/python"
export PATH="$VENV/bin:$PATH"
JOBS=$(nproc)

echo "== C++ unit tests"
cmake -S . -B build/cpp-tests -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPYTFCOMM_BUILD_TESTS=ON -DPYTFCOMM_BUILD_PYTHON=OFF >/dev/null
cmake --build build/cpp-tests -j "$JOBS" >/dev/null
ctest --test-dir build/cpp-tests --output-on-failure -j "$JOBS" --timeout 300

if [[ "${PYTFCOMM_SANITIZE:-1}" != "0" ]]; then
  echo "== C++ unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  cmake -S . -B build/cpp-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPYTFCOMM_SANITIZE=ON \
    -DPYTFCOMM_BUILD_TESTS=ON -DPYTFCOMM_BUILD_PYTHON=OFF >/dev/null
  cmake --build build/cpp-asan -j "$JOBS" >/dev/null
  ctest --test-dir build/cpp-asan --output-on-failure -j "$JOBS" --timeout 600
fi

FUZZ_SECONDS=${PYTFCOMM_FUZZ_SECONDS:-30}
if [[ "$FUZZ_SECONDS" != "0" ]]; then
  echo "== fuzzing the wire protocol for ${FUZZ_SECONDS} s (fuzz/run.sh; PYTFCOMM_FUZZ_SECONDS=0 skips)"
  if command -v clang++ >/dev/null; then
    bash fuzz/run.sh "$FUZZ_SECONDS"
  else
    echo "!! fuzz NOT RUN: clang++ missing (apt-get install clang libclang-rt-14-dev)" >&2
  fi
fi

echo "== lint (scripts/lint.sh, the same checks as the pre-commit hooks)"
bash scripts/lint.sh

echo "== Python tests"
# The pytest script (not python -m pytest) keeps the source tree off sys.path,
# so the installed pytfcomm is what gets tested.
"$VENV/bin/pytest" -p no:cacheprovider "$@"
