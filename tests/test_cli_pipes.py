"""A command whose stdout reader leaves early (`prep read ... --ids-only | head -1`) ends quietly with exit 0.

Python ignores SIGPIPE, so a write to a pipe nobody reads raises BrokenPipeError; prep treats that as
the reader having taken what it wanted, as `cat` and `ls` do. The reader end is closed before the
command starts, so every command here meets the closed pipe on its first write, whatever its timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tables
from prep.materialize import materialize_shuffle

REPO = Path(__file__).resolve().parent.parent


def into_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """Runs ``prep ARGS`` with stdout a pipe whose reader is already gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    try:
        return subprocess.run([sys.executable, "-m", "prep", "-q", *args], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, env=env, timeout=300)
    finally:
        os.close(write_end)


@pytest.fixture(scope="module")
def materialized(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("pipes")
    table = tables.synthetic_table(str(root / "t.lance"), num_rows=200, max_len=20)
    out = str(root / "out")
    materialize_shuffle(table=table, output=out, epochs=1, splits=4, executor="local")
    return out


@pytest.mark.parametrize("args", [
    ["read", "{out}", "--global-batch-size", "4", "--ids-only"], ["inspect", "{out}"], ["verify", "{out}"],
], ids=["read", "inspect", "verify"])
def test_a_reader_that_left_ends_the_command_quietly_with_exit_0(materialized, args):
    proc = into_closed_pipe(*[a.format(out=materialized) for a in args])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "BrokenPipe" not in proc.stderr and "Exception ignored" not in proc.stderr and "error" not in proc.stderr


@pytest.mark.slow
def test_head_takes_the_first_line_and_prep_exits_0(materialized):
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        ["bash", "-c", 'set -o pipefail; "$0" -m prep -q read "$1" --global-batch-size 4 --ids-only | head -1', sys.executable,
         materialized], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("0 ") and proc.stdout.count("\n") == 1 and proc.stderr == ""
