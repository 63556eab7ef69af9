#!/usr/bin/env bash
# Creates (or reuses) the project environment and installs prep into it with the exact versions
# of constraints/dev.txt (the set CI tests; pyproject.toml itself only states ranges).
# Idempotent: a second run only reinstalls when pyproject.toml or constraints/dev.txt changed.
# VENV (default .venv at the repo root) and PYTHON (default python3.11) choose where and with what.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
if [ ! -x "$VENV/bin/python" ]; then
  if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    echo "constraints/dev.txt is the set tested on Python 3.11 (found $("$PYTHON" --version)); set PYTHON=/path/to/python3.11" >&2
    exit 1
  fi
  echo "creating $VENV ..." >&2
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
fi
stamp=$VENV/.prep-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints/dev.txt -nt "$stamp" ] || [ ! -x "$VENV/bin/prep" ]; then
  echo "installing prep and its dependencies into $VENV (a few minutes the first time) ..." >&2
  # The distribution was called `prep` before it became `prep-lance`: drop that editable install first.
  if "$VENV/bin/pip" show -q prep >/dev/null 2>&1; then
    "$VENV/bin/pip" uninstall -q -y prep
  fi
  "$VENV/bin/pip" install -q -c constraints/dev.txt -e ".[test]"
  touch "$stamp"
fi
