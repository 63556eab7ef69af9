#!/usr/bin/env bash
# Sets up the environment if needed (scripts/setup.sh: constraints/dev.txt, in VENV, default .venv),
# then runs the whole test suite. The tests start what they need themselves: a local Ray, a real
# `ray start --head` for `ray job submit`, and S3, Azure Blob and GCS endpoints on 127.0.0.1 (moto_server,
# Azurite, fake-gcs-server; all stopped at the end). The oldest versions prep claims: scripts/test-oldest.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${VENV:-.venv}
export TOKENIZERS_PARALLELISM=false RAY_DISABLE_USAGE_STATS=1
# PREP_TEST_WORKERS=N runs N test files at a time (pytest-xdist; a file's module fixtures stay in one
# process). The default, 0, runs them in this process: on a 2-core machine two at a time still took
# 27 min (51 min of test time overlapped; the suite is CPU-bound: its tests start real processes).
exec "$VENV/bin/python" -m pytest -n "${PREP_TEST_WORKERS:-0}" --dist loadfile "$@"
