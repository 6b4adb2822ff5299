#!/usr/bin/env bash
# The static checks, exactly as CI runs them (scripts/test.sh) and as the
# pre-commit hooks run them (.pre-commit-config.yaml): ruff lint, ruff format,
# clang-format on every C++ and CUDA file, the layering of csrc/ against
# docs/architecture.md (tests/project/test_layering.py, which pytest runs too), mypy on
# pytfcomm/ (configured in pyproject.toml), shellcheck on the shell scripts, and
# no file over 1 MiB in git's index (scripts/check_large_files.py).
# `scripts/lint.sh --fix` rewrites what ruff and clang-format can fix instead of
# failing; the other checks run either way. Offline: every tool comes from .venv or
# Debian (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
VPY=${PYTFCOMM_VENV:-$PWD/.venv}/bin/python
PY_DIRS=(pytfcomm tests benchmarks examples fuzz scripts)
mapfile -t CXX < <(git ls-files -co --exclude-standard -- 'csrc/*.h' 'csrc/*.cc' 'csrc/*.cu' \
  'tests/cpp/*.h' 'tests/cpp/*.cc' 'tests/gpu/standin/*.h' 'tests/gpu/standin/*.cc' \
  'fuzz/*.h' 'fuzz/*.cc')
# git's pathspec `*` also matches `/`: tests/*.sh covers tests/workers/*.sh.
mapfile -t SH < <(git ls-files -co --exclude-standard -- 'scripts/*.sh' .ci/run 'fuzz/*.sh' \
  'benchmarks/*.sh' 'tests/*.sh')

missing() {  # $1: the tool, $2: how to get it
  echo "scripts/lint.sh: $1 is missing: $2" >&2
  exit 2
}
"$VPY" -c 'import mypy' 2>/dev/null \
  || missing "mypy (in $VPY)" "run scripts/setup.sh (requirements-dev.txt)"
command -v shellcheck >/dev/null || missing shellcheck "apt-get install shellcheck"
command -v clang-format >/dev/null || missing clang-format "apt-get install clang-format"

if [[ "${1:-}" == "--fix" ]]; then
  "$VPY" -m ruff check --fix "${PY_DIRS[@]}"
  "$VPY" -m ruff format "${PY_DIRS[@]}"
  clang-format -i "${CXX[@]}"
else
  "$VPY" -m ruff check "${PY_DIRS[@]}"
  "$VPY" -m ruff format --check "${PY_DIRS[@]}"
  clang-format --dry-run --Werror "${CXX[@]}"
fi
"$VPY" tests/project/test_layering.py
"$VPY" tests/project/test_engine_classes.py
"$VPY" -m mypy
shellcheck -x "${SH[@]}"  # -x: follow `source` (paths from the repository root)
"$VPY" scripts/check_large_files.py
