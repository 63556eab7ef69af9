"""The type checker holds the contracts, the plan, the reader and the cache, and their protocols, to the code
([tool.mypy] in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Strict and clean; tests/test_reader_protocols.py assigns each reader stage and layout to its protocol.
CHECKED = ("prep/contracts", "prep/plan", "prep/reader", "prep/cache", "tests/test_reader_protocols.py")


def _mypy(*paths: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", *paths], cwd=REPO, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


@pytest.mark.slow  # about 90 s with a cold cache (it reads numpy's, torch's and pyarrow's types), seconds warm
def test_contracts_plan_reader_and_cache_type_check_clean():
    run = _mypy(*CHECKED)
    assert run.returncode == 0, f"mypy {' '.join(CHECKED)} found problems:\n{run.stdout}{run.stderr}"


@pytest.mark.slow
def test_a_stage_that_breaks_its_protocol_is_a_type_error(tmp_path):
    broken = tmp_path / "broken_stage.py"
    broken.write_text(
        "from prep.reader.batch import Batch\n"
        "from prep.reader.stage import Stage\n\n\n"
        "class NoState:\n"
        "    def reset(self, initial_state: dict[str, int] | None) -> None: ...\n"
        "    def next(self) -> Batch:\n"
        "        raise StopIteration\n"
        "    def shutdown(self) -> None: ...\n\n\n"
        "stage: Stage[Batch] = NoState()\n")
    run = _mypy(str(broken))
    assert run.returncode == 1, run.stdout
    assert 'variable has type "Stage[Batch]"' in run.stdout and "protocol member:" in run.stdout, run.stdout
    assert run.stdout.split("protocol member:")[1].split()[2] == "get_state" and "Found 1 error" in run.stdout, run.stdout
