#!/usr/bin/env bash
# Sets up .venv if needed, then runs the whole test suite. The tests start what they
# need themselves: a local Ray, a real `ray start --head` for `ray job submit`, and a
# moto_server S3 endpoint on 127.0.0.1 (all stopped at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TOKENIZERS_PARALLELISM=false RAY_DISABLE_USAGE_STATS=1
exec .venv/bin/python -m pytest "$@"
