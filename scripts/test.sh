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
# The system packages first: the C++ and fuzzing stages below need only them,
# so they start before the rest of setup (its requirement installs keep one
# core busy and leave the other idle).
bash scripts/setup.sh --packages
VENV=${PYTFCOMM_VENV:-$PWD/.venv}
JOBS=$(nproc)

# Stages beside the Python suite, each in a process group of its own with its
# log under build/; at the end the script waits for each and fails, printing
# the log's tail, if one failed. A failed foreground stage ends them all.
#  - the C++ unit tests: their builds (plain, then AddressSanitizer + UBSan)
#    at the lowest priority, since compiling needs no timing and the Python
#    suite's multi-process tests leave a core idle much of the time
#    (deadlines, liveness waits, ranks waiting for each other); then their
#    tests at normal priority, while pytest still runs;
#    Both builds are unity builds (CMake's CMAKE_UNITY_BUILD: a few .cc files
#    per compiler run, so the headers they share are parsed once), and the
#    plain one has no -g (nothing reads its debug info; the sanitizer build
#    keeps -g for its reports): together about half the CPU time;
#  - fuzzing (its own build, then a run of a fixed wall time), beside lint.
SANITIZE=${PYTFCOMM_SANITIZE:-1}
[[ "$QUICK" == 1 ]] && SANITIZE=0
mkdir -p build
BG_PIDS=()
BG_NAMES=()
BG_LOGS=()
bg_stage() {  # $1: the stage's name, $2: its log; the rest: the command
  local name=$1 log=$2
  shift 2
  set -m
  "$@" >"$log" 2>&1 &
  BG_PIDS+=("$!")
  set +m
  BG_NAMES+=("$name")
  BG_LOGS+=("$log")
  echo "== $name started beside the stages below (log: ${log#"$PWD"/})"
}
# shellcheck disable=SC2317  # reached through the trap
stop_bg() {
  local pid
  for pid in "${BG_PIDS[@]}"; do kill -- -"$pid" 2>/dev/null || true; done
}
trap stop_bg EXIT

start_cpp_stage() {
  # shellcheck disable=SC2016  # the script's $1 and $2 are its own arguments
  bg_stage "C++ unit tests (builds at nice 19, then ctest)" "$PWD/build/cpp-tests.log" bash -c '
  set -euo pipefail
  nice -n 19 cmake -S . -B build/cpp-tests -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DCMAKE_UNITY_BUILD=ON \
    -DPYTFCOMM_BUILD_TESTS=ON -DPYTFCOMM_BUILD_PYTHON=OFF
  nice -n 19 cmake --build build/cpp-tests -j "$1"
  if [[ "$2" != "0" ]]; then
    nice -n 19 cmake -S . -B build/cpp-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPYTFCOMM_SANITIZE=ON \
      -DCMAKE_UNITY_BUILD=ON -DPYTFCOMM_BUILD_TESTS=ON -DPYTFCOMM_BUILD_PYTHON=OFF
    nice -n 19 cmake --build build/cpp-asan -j "$1"
  fi
  echo "== C++ unit tests"
  ctest --test-dir build/cpp-tests --output-on-failure -j "$1" --timeout 300
  if [[ "$2" != "0" ]]; then
    echo "== C++ unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
    ctest --test-dir build/cpp-asan --output-on-failure -j "$1" --timeout 600
  fi
' cpp-tests "$JOBS" "$SANITIZE"
}
# CMake and Ninja on the PATH already: a venv's from an earlier setup (the
# ones its build directories were made with), else Debian's: start now; else
# once setup has put the venv's on the PATH.
cpp_started=0
[[ -x "$VENV/bin/cmake" && -x "$VENV/bin/ninja" ]] && export PATH="$VENV/bin:$PATH"
if command -v ninja >/dev/null && command -v cmake >/dev/null \
  && [[ "$(printf '3.18\n%s\n' "$(cmake --version | head -n1 | awk '{print $3}')" | sort -V | head -n1)" == 3.18 ]]; then
  start_cpp_stage
  cpp_started=1
fi

FUZZ_SECONDS=${PYTFCOMM_FUZZ_SECONDS:-30}
[[ "$QUICK" == 1 ]] && FUZZ_SECONDS=0
if [[ "$FUZZ_SECONDS" != "0" ]]; then
  if command -v clang++ >/dev/null; then
    bg_stage "fuzzing the wire protocol for ${FUZZ_SECONDS} s (fuzz/run.sh; PYTFCOMM_FUZZ_SECONDS=0 skips)" \
      "$PWD/build/fuzz-stage.log" bash fuzz/run.sh "$FUZZ_SECONDS"
  else
    echo "!! fuzz NOT RUN: clang++ missing (apt-get install clang libclang-rt-14-dev)" >&2
  fi
fi

echo "== [${SECONDS} s] setup (scripts/setup.sh: the venv, its requirements, pytfcomm)"
bash scripts/setup.sh
export PATH="$VENV/bin:$PATH"
[[ "$cpp_started" == 1 ]] || start_cpp_stage

echo "== [${SECONDS} s] lint (scripts/lint.sh, the same checks as the pre-commit hooks)"
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
echo "== [${SECONDS} s] Python tests (${WORKERS} worker(s); PYTFCOMM_TEST_WORKERS=1 runs them in one process)"
# The pytest script (not python -m pytest) keeps the source tree off sys.path,
# so the installed pytfcomm is what gets tested.
rc=0
"$VENV/bin/pytest" -p no:cacheprovider --durations=20 "${XDIST[@]}" "${TIER[@]}" "$@" || rc=$?
if [[ "$rc" == 5 ]]; then
  echo "!! pytest ran no tests (exit code 5): the arguments (${TIER[*]} $*) select none;" \
    "check -k, -m and the paths" >&2
fi
[[ "$rc" == 0 ]] || exit "$rc"

echo "== [${SECONDS} s] the stages beside pytest (waiting for them)"
failed=0
for i in "${!BG_PIDS[@]}"; do
  if wait "${BG_PIDS[$i]}"; then
    echo "== ${BG_NAMES[$i]}: passed (log: ${BG_LOGS[$i]#"$PWD"/})"
    grep -E "tests passed|tests failed|Total Test time|^stat::number_of_executed_units|^Done [0-9]+ runs" \
      "${BG_LOGS[$i]}" || true
  else
    tail -n 60 "${BG_LOGS[$i]}" >&2
    echo "!! ${BG_NAMES[$i]} FAILED (whole log: ${BG_LOGS[$i]#"$PWD"/})" >&2
    failed=1
  fi
done
BG_PIDS=()
[[ "$failed" == 0 ]] || exit 1
echo "== [${SECONDS} s] the whole suite passed"
