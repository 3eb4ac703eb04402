#!/usr/bin/env bash
# Idempotent setup: the graphviz `dot` binary, a venv in .venv, the package with every extra.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v dot >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get install -y -q graphviz >/dev/null 2>&1 || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q graphviz >/dev/null; }
  else
    echo "setup: install graphviz (the 'dot' binary) with your package manager" >&2
  fi
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=.venv/.tpg-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".[all,dev]"
  touch "$stamp"
fi
