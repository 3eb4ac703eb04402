#!/usr/bin/env bash
# Runs the whole test suite. Triton's interpreter mode must be chosen before Python
# starts, so the Triton kernel tests run in a second pytest process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TILELANG_CACHE_DIR="${TILELANG_CACHE_DIR:-$PWD/.cache/tilelang}" TPG_CACHE_DIR="${TPG_CACHE_DIR:-$PWD/.cache/tpg}"
.venv/bin/python -m pytest -q -n 2 --ignore=tests/interp "$@" tests
TRITON_INTERPRET=1 .venv/bin/python -m pytest -q -n 2 "$@" tests/interp
.venv/bin/python -m pytest -q -n 2 --nbmake notebooks
