"""Every code block in README.md and docs/ runs as written, or says why it cannot.

A page's ``bash`` and ``python`` blocks run in order, as a reader following the page
would type them, in a fresh folder laid out like a checkout (``configs/``,
``pipelines/``, ``examples/`` and ``../shared/data`` where the shipped configs expect
them). A block that cannot run here (it needs a cluster, a GPU, object storage, or it
is a fragment of a larger program) is preceded by ``<!-- not run: REASON -->``; the
reason is required. ``json`` and ``yaml`` blocks must parse. ``text`` blocks are
printed output and are not checked. docs/cli.md is generated from the CLI and checked
by tests/test_cli_surface.py; the programs of docs/trainers/ train a model with two
worker processes and are run by tests/test_trainers_docs.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from common.warm_cli import warm_prep
from conftest import REPO, SHARED_DATA, VENV_BIN

PAGES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md")
                              if p.name != "cli.md" and p.parent.name != "trainers")]
FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->\s*$")
RUNNABLE = {"bash", "sh", "python"}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str
    not_run: str | None  # the reason, when the page marks the block


def blocks(page: str) -> list[Block]:
    text = (REPO / page).read_text()
    found = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = NOT_RUN.search(before)
        found.append(Block(page, text[: m.start()].count("\n") + 1, m.group(1), m.group(2),
                           mark.group(1) if mark else None))
    return found


def test_every_marked_block_says_why() -> None:
    """``<!-- not run: -->`` without a reason, or in front of output, is a mistake."""
    for page in PAGES:
        for b in blocks(page):
            if b.not_run is not None:
                assert b.not_run, f"{b.page}:{b.line}: <!-- not run: --> needs a reason"
                assert b.lang in RUNNABLE, f"{b.page}:{b.line}: only bash/python blocks are run; drop the mark"


@pytest.mark.parametrize("page", PAGES)
def test_data_blocks_parse(page: str) -> None:
    for b in blocks(page):
        if b.lang == "json":
            try:
                json.loads(b.code)
            except ValueError as exc:
                pytest.fail(f"{b.page}:{b.line}: the json block does not parse: {exc}")
        elif b.lang == "yaml":
            try:
                yaml.safe_load(b.code)
            except yaml.YAMLError as exc:
                pytest.fail(f"{b.page}:{b.line}: the yaml block does not parse: {exc}")


# The pages' data, cut to what their commands need to show what they say: the whole of GSM8K (7,473 rows)
# and of the photos (248) cost seconds per command that read them, a dozen times a page. reader.md reads
# 61 steps of 96 rows in epoch 0 over 48 splits: it gets all of GSM8K.
GSM8K_ROWS = {"docs/reader.md": None}
GSM8K_ROWS_DEFAULT = 2000  # usage.md: 11 steps of 96 in epoch 0; mix.yaml: both of its filters fill batches of 96
PHOTOS_PER_CLASS = 24  # one photo per split of 48; guide.md copies 6 ants


def _shared(shared: Path, page: str) -> None:
    """``shared`` like ../shared, with data/gsm8k/train.jsonl and data/hymenoptera/train cut (see above)."""
    shared.mkdir()
    for entry in SHARED_DATA.parent.iterdir():
        if entry.name != "data":
            (shared / entry.name).symlink_to(entry)
    for entry in SHARED_DATA.iterdir():
        if entry.name not in ("gsm8k", "hymenoptera"):
            (shared / "data" / entry.name).parent.mkdir(exist_ok=True)
            (shared / "data" / entry.name).symlink_to(entry)
    gsm8k = shared / "data" / "gsm8k"
    gsm8k.mkdir()
    rows = GSM8K_ROWS.get(page, GSM8K_ROWS_DEFAULT)
    for entry in (SHARED_DATA / "gsm8k").iterdir():
        if rows is None or entry.name != "train.jsonl":  # cut: written below
            (gsm8k / entry.name).symlink_to(entry)
    if rows is not None:
        with open(SHARED_DATA / "gsm8k" / "train.jsonl") as f:
            (gsm8k / "train.jsonl").write_text("".join(line for _, line in zip(range(rows), f)))
    for folder in sorted((SHARED_DATA / "hymenoptera" / "train").iterdir()):
        (shared / "data" / "hymenoptera" / "train" / folder.name).mkdir(parents=True)
        for photo in sorted(folder.iterdir())[:PHOTOS_PER_CLASS]:
            (shared / "data" / "hymenoptera" / "train" / folder.name / photo.name).symlink_to(photo)


def _sandbox(tmp_path: Path, page: str) -> tuple[Path, dict[str, str]]:
    """A folder laid out like a checkout beside ../shared, and the environment a user has there."""
    root = tmp_path / "checkout"
    root.mkdir()
    for name in ("configs", "pipelines", "examples", "benchmarks", "notebooks"):
        (root / name).symlink_to(REPO / name)
    _shared(tmp_path / "shared", page)
    (root / "home").mkdir()
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(root / "home"),
           "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    for key in ("RAY_ADDRESS", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(key, None)
    return root, env


def _run(b: Block, root: Path, env: dict[str, str]) -> None:
    if b.lang == "python":
        script = root / f"_snippet_{b.line}.py"
        script.write_text(b.code)
        cmd = [str(VENV_BIN / "python"), script.name]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", b.code]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        tail = (proc.stdout[-1500:] + "\n" + proc.stderr[-3000:]).strip()
        pytest.fail(f"{b.page}:{b.line}: the {b.lang} block failed as written (exit {proc.returncode}):\n{b.code}\n---\n{tail}")


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if any(b.lang in RUNNABLE and b.not_run is None for b in blocks(p))])
def test_page_runs_as_written(page: str, tmp_path: Path, shared_data: Path) -> None:
    """The page's runnable blocks, in order, in one fresh checkout-like folder. ``prep`` there is the real
    entry point forked from a process that imported it once (tests/common/warm_cli.py): a page runs a dozen
    commands, and each fresh interpreter would pay 3-5 CPU-s of imports."""
    root, env = _sandbox(tmp_path, page)
    with warm_prep(tmp_path / "bin", env) as env:
        for b in blocks(page):
            if b.lang in RUNNABLE and b.not_run is None:
                _run(b, root, env)
