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
# process, each worker starts its own Ray and endpoints). The default, 2: on this 2-core machine the suite
# waits on processes it starts (Ray, DataLoader workers, `ray job submit`) for much of its time, so two files at
# a time took 12 min 28 s where one at a time took ~24 min (2026-12-03, docs/figures.md); three at a time took no less
# than two (15 min 6 s against 14-15 min: the CPUs are busy 98% of the time then) and made a timing test fail. 0 runs
# them in this process. --no-loadscope-reorder keeps the order tests/conftest.py gives the files (its Ray files first,
# costliest first) instead of xdist's (most tests first).
exec "$VENV/bin/python" -m pytest -n "${PREP_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
