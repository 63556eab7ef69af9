#!/usr/bin/env bash
# The test suite on the oldest versions prep claims: a fresh virtual environment with every
# dependency of pyproject.toml (extras included) pinned to its lower bound (scripts/lower_bounds.py),
# their own dependencies resolved by pip. Not part of CI (CI installs constraints/dev.txt); run it
# when a lower bound changes and note the result in docs/versions.md.
#   bash scripts/test-oldest.sh                      # the suite without the slow tests
#   bash scripts/test-oldest.sh tests/test_reader.py # any pytest arguments
# VENV (default /tmp/prep-oldest-venv) is recreated on every run; PYTHON picks the interpreter.
# Packages come from the package index alone (pip's config files and PIP_FIND_LINKS are set aside): a
# local wheel cache's `torch 2.13.0+cpu` sorts above torch 2.13.0 itself and pairs with no torchvision
# release ("operator torchvision::nms does not exist"). The CUDA torch wheels make this a ~3 GB download.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-/tmp/prep-oldest-venv}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$PYTHON" scripts/lower_bounds.py > "$VENV/lower-bounds.txt"
echo "installing the lower bounds into $VENV:" >&2
tr '\n' ' ' < "$VENV/lower-bounds.txt" >&2; echo >&2
env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null "$VENV/bin/pip" install -q -c "$VENV/lower-bounds.txt" -e ".[test]"
"$VENV/bin/pip" check
"$VENV/bin/pip" freeze --exclude-editable > "$VENV/installed.txt"
export TOKENIZERS_PARALLELISM=false RAY_DISABLE_USAGE_STATS=1
if [ "$#" -eq 0 ]; then
  set -- -q -m "not slow"
fi
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
