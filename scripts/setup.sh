#!/usr/bin/env bash
# Creates (or reuses) the project environment in .venv/ and installs prep into it.
# Idempotent: a second run only reinstalls when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "prep needs Python 3.11 (found $("$PYTHON" --version)); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv ..." >&2
  "$PYTHON" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
fi
stamp=.venv/.prep-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ ! -x .venv/bin/prep ]; then
  echo "installing prep and its dependencies into .venv (a few minutes the first time) ..." >&2
  .venv/bin/pip install -q -e ".[test]"
  touch "$stamp"
fi
