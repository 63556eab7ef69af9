"""The code on each page of docs/trainers/ runs as written, with its two worker processes (issue 20, item 7):
the pages' programs keep the training under ``if __name__ == "__main__":`` because forkserver workers import
the script again, and none of them prints a warning that contradicts what prep guarantees (Lightning's
"dataloader is not resumable", Lance's "not fork-safe ... use spawn or forkserver").

Each page's block is saved as a script and run in a folder where ``out/gsm8k-epochs`` is a small materialized
output; the one change is ``global_batch_size=64`` -> 4, so that a CPU step of the tiny model takes a moment.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import reader_fixtures as rf

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not rf.GSM8K.exists(), reason=f"real data not found at {rf.SHARED_DATA}")]
REPO = Path(__file__).resolve().parent.parent
PAGES = {"accelerate.md": [], "lightning.md": [], "hf_trainer.md": [], "torchdata.md": [],
         "torchrun.md": ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]}


def page_program(page: str) -> str:
    text = (REPO / "docs" / "trainers" / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1, f"{page}: one program a page"
    assert 'if __name__ == "__main__":' in blocks[0] and "num_workers=2" in blocks[0], page
    assert "global_batch_size=64" in blocks[0], page
    return blocks[0].replace("global_batch_size=64", "global_batch_size=4")


@pytest.mark.parametrize("page", list(PAGES))
def test_trainer_page_runs_as_written_with_workers(page, tmp_path):
    path, _ = rf.cached_output("sft4x2")  # 4 splits, 2 epochs: G=4 -> 3 steps an epoch
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "gsm8k-epochs").symlink_to(path)
    script = tmp_path / f"train_{page.replace('.md', '.py')}"  # not accelerate.py: it would shadow the package
    script.write_text(page_program(page))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "2", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, *PAGES[page], str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for warning in ("not resumable", "not fork-safe", "Traceback"):
        assert warning not in proc.stderr, proc.stderr[-4000:]
