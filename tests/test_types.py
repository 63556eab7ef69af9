"""The type checker holds the contracts, the plan and their protocols to the code ([tool.mypy] in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Strict and clean. prep/reader is not yet (65 errors in 22 files at this commit): add it once it is.
CHECKED = ("prep/contracts", "prep/plan")


@pytest.mark.slow  # about 60 s with a cold cache (it reads numpy's and pyarrow's types), seconds warm
def test_contracts_and_plan_type_check_clean():
    run = subprocess.run([sys.executable, "-m", "mypy", *CHECKED], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, f"mypy {' '.join(CHECKED)} found problems:\n{run.stdout}{run.stderr}"
