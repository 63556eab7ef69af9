#!/usr/bin/env bash
# The test suite on another Python (3.12, 3.13, ...): a fresh virtual environment on that interpreter,
# prep and its test extra installed as a user would (pip resolves the newest versions the ranges allow
# for that Python; the development set, constraints/dev.txt, is Python 3.11's). Run it before claiming
# a Python version in pyproject.toml (tests/test_environment.py), and note the result in docs/versions.md.
#   bash scripts/test-python.sh 3.12                          # the suite without the slow tests
#   bash scripts/test-python.sh 3.13 tests/test_reader.py     # any pytest arguments
# PYTHON (default: python3.X on PATH, else ~/.pyenv/versions/3.X*) picks the interpreter; VENV (default
# /tmp/prep-python-3.X) is recreated on every run. torch's CUDA wheels make this a multi-GB download.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:?usage: bash scripts/test-python.sh 3.12 [pytest arguments]}
shift
PYTHON=${PYTHON:-$(command -v "python$VERSION" || ls -d "$HOME"/.pyenv/versions/"$VERSION"*/bin/python 2>/dev/null | tail -1 || true)}
if [ -z "$PYTHON" ] || ! "$PYTHON" -c "import sys; sys.exit(f'{sys.version_info[0]}.{sys.version_info[1]}' != '$VERSION')"; then
  echo "no Python $VERSION found: set PYTHON=/path/to/python$VERSION" >&2
  exit 1
fi
VENV=${VENV:-/tmp/prep-python-$VERSION}
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
echo "installing prep[test] into $VENV with $("$PYTHON" --version) ..." >&2
env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null "$VENV/bin/pip" install -q -e ".[test]"
"$VENV/bin/pip" check
"$VENV/bin/pip" freeze --exclude-editable > "$VENV/installed.txt"
export TOKENIZERS_PARALLELISM=false RAY_DISABLE_USAGE_STATS=1
if [ "$#" -eq 0 ]; then
  set -- -q -m "not slow"
fi
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
