#!/usr/bin/env bash
# The main job: the whole pipeline on a TensorPlay program on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TILELANG_CACHE_DIR="${TILELANG_CACHE_DIR:-$PWD/.cache/tilelang}" TPG_CACHE_DIR="${TPG_CACHE_DIR:-$PWD/.cache/tpg}"
.venv/bin/python examples/demo.py --out out/demo "$@"
