#!/usr/bin/env bash
# Set everything up, then run the whole test suite: C++ unit tests (ranks as
# threads, plus the same under AddressSanitizer/UBSan when PYTFCOMM_SANITIZE
# is not 0), lint/format checks, and the Python suite (multi-process on
# 127.0.0.1). Extra arguments go to pytest.
#   scripts/test.sh --quick [pytest args]: the quick tier (CONTRIBUTING.md):
#   lint, the plain C++ unit tests and pytest -m "not slow" (tests/quick.txt);
#   no fuzzing, no AddressSanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
if [[ "${1:-}" == "--quick" ]]; then
  QUICK=1
  shift
fi
bash scripts/setup.sh
VENV=${PYTFCOMM_VENV:-$PWD/.venv}
export PATH="$VENV/bin:$PATH"
JOBS=$(nproc)

# The C++ test builds (plain, then AddressSanitizer + UBSan) run at the lowest
# priority beside the stages below: the Python suite's multi-process tests
# leave a core idle much of the time (deadlines, liveness waits, ranks waiting
# for each other), and compiling needs no timing. Their tests run after it.
SANITIZE=${PYTFCOMM_SANITIZE:-1}
[[ "$QUICK" == 1 ]] && SANITIZE=0
mkdir -p build
CPP_LOG=$PWD/build/cpp-builds.log
set -m  # the builds get a process group of their own: a failed stage below ends all of it
# shellcheck disable=SC2016  # the script's $1 and $2 are its own arguments
nice -n 19 bash -c '
  set -euo pipefail
  cmake -S . -B build/cpp-tests -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPYTFCOMM_BUILD_TESTS=ON -DPYTFCOMM_BUILD_PYTHON=OFF
  cmake --build build/cpp-tests -j "$1"
  if [[ "$2" != "0" ]]; then
    cmake -S . -B build/cpp-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPYTFCOMM_SANITIZE=ON \
      -DPYTFCOMM_BUILD_TESTS=ON -DPYTFCOMM_BUILD_PYTHON=OFF
    cmake --build build/cpp-asan -j "$1"
  fi
' cpp-builds "$JOBS" "$SANITIZE" >"$CPP_LOG" 2>&1 &
CPP_PID=$!
set +m
trap 'kill -- -"$CPP_PID" 2>/dev/null || true' EXIT
echo "== C++ test builds started beside the stages below (log: build/cpp-builds.log)"

FUZZ_SECONDS=${PYTFCOMM_FUZZ_SECONDS:-30}
[[ "$QUICK" == 1 ]] && FUZZ_SECONDS=0
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

# Two pytest-xdist workers: like the C++ builds, a second worker fills the
# time the suite's multi-process tests leave a core idle. Whole modules go to
# a worker, and every module that needs the session's CUDA build and GPU
# stand-ins goes to the same one (tests/_xdist_groups.py).
# PYTFCOMM_TEST_WORKERS=1 runs the suite in one process.
WORKERS=${PYTFCOMM_TEST_WORKERS:-2}
if ! [[ "$WORKERS" =~ ^[1-9][0-9]*$ ]]; then
  echo "!! PYTFCOMM_TEST_WORKERS=$WORKERS: give a whole number of workers, 1 or more" >&2
  exit 2
fi
XDIST=()
if [[ "$WORKERS" -gt 1 ]]; then
  XDIST=(-n "$WORKERS" --dist loadfile)
fi
TIER=()
if [[ "$QUICK" == 1 ]]; then
  TIER=(-m "not slow")  # a later -m among the arguments replaces it
fi
echo "== Python tests (${WORKERS} worker(s); PYTFCOMM_TEST_WORKERS=1 runs them in one process)"
# The pytest script (not python -m pytest) keeps the source tree off sys.path,
# so the installed pytfcomm is what gets tested.
rc=0
"$VENV/bin/pytest" -p no:cacheprovider "${XDIST[@]}" "${TIER[@]}" "$@" || rc=$?
if [[ "$rc" == 5 ]]; then
  echo "!! pytest ran no tests (exit code 5): the arguments (${TIER[*]} $*) select none;" \
    "check -k, -m and the paths" >&2
fi
[[ "$rc" == 0 ]] || exit "$rc"

echo "== C++ test builds (waiting for them)"
if ! wait "$CPP_PID"; then
  tail -n 60 "$CPP_LOG" >&2
  echo "!! the C++ test builds failed (whole log: build/cpp-builds.log)" >&2
  exit 1
fi
echo "== C++ unit tests"
ctest --test-dir build/cpp-tests --output-on-failure -j "$JOBS" --timeout 300
if [[ "$SANITIZE" != "0" ]]; then
  echo "== C++ unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  ctest --test-dir build/cpp-asan --output-on-failure -j "$JOBS" --timeout 600
fi
