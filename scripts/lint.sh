#!/usr/bin/env bash
# The style checks, exactly as CI runs them (scripts/test.sh) and as the
# pre-commit hooks run them (.pre-commit-config.yaml): ruff lint, ruff format,
# clang-format on every C++ and CUDA file, and the layering of csrc/ against
# docs/architecture.md (tests/test_layering.py, which pytest runs too).
# `scripts/lint.sh --fix` rewrites the files instead of failing.
set -euo pipefail
cd "$(dirname "$0")/.."
VPY=${PYTFCOMM_VENV:-$PWD/.venv}/bin/python
PY_DIRS=(pytfcomm tests benchmarks examples fuzz scripts)
mapfile -t CXX < <(git ls-files -co --exclude-standard -- 'csrc/*.h' 'csrc/*.cc' 'csrc/*.cu' \
  'tests/cpp/*.h' 'tests/cpp/*.cc' 'tests/gpu/standin/*.h' 'tests/gpu/standin/*.cc' \
  'fuzz/*.h' 'fuzz/*.cc')
if [[ "${1:-}" == "--fix" ]]; then
  "$VPY" -m ruff check --fix "${PY_DIRS[@]}"
  "$VPY" -m ruff format "${PY_DIRS[@]}"
  clang-format -i "${CXX[@]}"
else
  "$VPY" -m ruff check "${PY_DIRS[@]}"
  "$VPY" -m ruff format --check "${PY_DIRS[@]}"
  clang-format --dry-run --Werror "${CXX[@]}"
fi
"$VPY" tests/test_layering.py
