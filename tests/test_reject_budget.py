"""The reject budget, and the commit points of a prepare job (issue 21, #4, #5, #6, #9).

- Over ``max_reject_fraction``, or with every row rejected, a job exits 1 with one line
  naming the top reasons; the rejects are committed (to look at), the table is not, and
  the plain rerun with a larger budget completes.
- A job killed at each commit point (claimed, rejects committed, table committed,
  old versions cleaned) leaves a state the plain rerun completes, with the output an
  uninterrupted run writes.
- ``rejects:`` equal to ``output:``, or inside it, is refused before anything is written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lance
import pytest

from prep.cli import main
from prep.errors import PrepError, TooManyRejects
from prep.io import lance_tables
from prep.prepare import faults
from prep.prepare.text.pretokenize import PretokenizeConfig, run_pretokenize

REPO = Path(__file__).resolve().parent.parent


def write_config(path: Path, tokenizer_dir: str, **kw) -> Path:
    path.write_text(json.dumps(dict(tokenizer=tokenizer_dir, format="sft", sft={"layout": "qa"}, executor="local", **kw)))
    return path


def inputs(root: Path, shared_data: Path, good: int, bad: int) -> Path:
    with open(shared_data / "gsm8k" / "train.jsonl", "rb") as f:
        lines = [next(f) for _ in range(good)]
    (root / "in").mkdir()
    (root / "in" / "a.jsonl").write_bytes(b"".join(lines) + b'{"question": "no answer"}\n' * bad)
    return root / "in" / "a.jsonl"


def test_over_the_budget_exits_1_names_the_reasons_keeps_the_rejects_and_the_rerun_completes(tokenizer_dir, shared_data, tmp_path, capsys):
    src = inputs(tmp_path, shared_data, good=30, bad=5)
    (src.parent / "b.jsonl").write_bytes(b'{"question": 1, "answer": "x"}\n' * 2)
    cfg = write_config(tmp_path / "c.yaml", tokenizer_dir)
    out = tmp_path / "o.lance"
    args = ["pretokenize", "--config", str(cfg), "--input", str(src.parent), "--output", str(out)]
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "7 of 37 rows rejected (18.9%)" in err[0], err
    assert "5 x \"missing field '…'\"" in err[0] and "2 x \"field '…' must be a string, got int\"" in err[0]
    assert "--max-reject-fraction" in err[0] and "was not written" in err[0]
    assert lance.dataset(tmp_path / "o.rejects.lance").count_rows() == 7
    assert not lance_tables.table_exists(str(out))
    assert main(["inspect", str(tmp_path / "o.rejects.lance")]) == 0
    assert "a table that was never committed" in capsys.readouterr().out.splitlines()[0]
    assert main(args + ["--max-reject-fraction", "0.2"]) == 0  # the plain rerun, no --overwrite
    assert lance.dataset(out).count_rows() == 30 and lance.dataset(tmp_path / "o.rejects.lance").count_rows() == 7
    assert src.exists()


def test_a_job_that_rejects_every_row_never_succeeds(tokenizer_dir, shared_data, tmp_path):
    src = inputs(tmp_path, shared_data, good=0, bad=3)
    cfg = PretokenizeConfig.model_validate(dict(input=str(src), output=str(tmp_path / "o.lance"), tokenizer=tokenizer_dir,
                                                format="sft", executor="local", max_reject_fraction=1.0))
    with pytest.raises(TooManyRejects, match=r"3 of 3 rows rejected \(100.0%\), every row"):
        run_pretokenize(cfg)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.jsonl").write_bytes(b"\n\n")
    with pytest.raises(TooManyRejects, match="no rows were read"):
        run_pretokenize(cfg.model_copy(update={"input": str(tmp_path / "empty"), "output": str(tmp_path / "e.lance")}))


@pytest.mark.parametrize("rejects", ["o.lance", "o.lance/", "o.lance/rejects.lance", "."])
def test_rejects_on_or_inside_the_output_is_refused_before_anything_is_written(rejects, tokenizer_dir, shared_data, tmp_path):
    src = inputs(tmp_path, shared_data, good=5, bad=0)
    out = tmp_path / "o.lance"
    cfg = PretokenizeConfig.model_validate(dict(input=str(src), output=str(out), rejects=str(tmp_path / rejects),
                                                tokenizer=tokenizer_dir, format="sft", executor="local"))
    with pytest.raises(PrepError, match="set rejects to a path of its own"):
        run_pretokenize(cfg)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["in"]


# --- kills at the commit points --------------------------------------------------------------------

def _killed_run(cfg: Path, src: Path, out: Path, point: str, *extra: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), faults.ENV: f"commit:kill:{point}"}
    proc = subprocess.run([sys.executable, "-m", "prep", "pretokenize", "--config", str(cfg), "--input", str(src),
                           "--output", str(out), *extra], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]


def _tables(out: Path) -> tuple:
    rejects = out.with_name(out.name.replace(".lance", ".rejects.lance"))
    return lance.dataset(out).to_table(), lance.dataset(rejects).to_table()


@pytest.mark.slow
@pytest.mark.parametrize("point,overwrite", [("claimed", False), ("rejects", False), ("table", True), ("cleaned", True)])
def test_a_kill_at_each_commit_point_leaves_what_the_plain_rerun_completes(point, overwrite, tokenizer_dir, shared_data, tmp_path):
    src = inputs(tmp_path, shared_data, good=40, bad=2)
    cfg = write_config(tmp_path / "c.yaml", tokenizer_dir)
    reference, out = tmp_path / "ref.lance", tmp_path / "o.lance"
    assert main(["pretokenize", "--config", str(cfg), "--input", str(src), "--output", str(reference)]) == 0
    flags = ["--overwrite"] if overwrite else []
    if overwrite:  # the points after the table commit happen only when a table is replaced
        assert main(["pretokenize", "--config", str(cfg), "--input", str(src), "--output", str(out)]) == 0
    _killed_run(cfg, src, out, point, *flags)
    assert main(["pretokenize", "--config", str(cfg), "--input", str(src), "--output", str(out), *flags]) == 0
    (table, rejects), (ref_table, ref_rejects) = _tables(out), _tables(reference)
    assert table.equals(ref_table) and rejects.equals(ref_rejects)
    assert len(lance.dataset(out).versions()) == len(lance.dataset(out.with_name("o.rejects.lance")).versions()) == 1


@pytest.mark.slow
def test_the_budget_holds_for_the_images_job_too(tmp_path):
    from prep.prepare.images.config import ImagesConfig
    from prep.prepare.images.job import run_decode_images
    from test_images import HYMENOPTERA

    if not HYMENOPTERA.is_dir():
        pytest.skip("needs the real photos")
    for cls in ("ants", "bees"):
        (tmp_path / "in" / cls).mkdir(parents=True)
        photo = sorted((HYMENOPTERA / cls).iterdir())[0]
        (tmp_path / "in" / cls / photo.name).write_bytes(photo.read_bytes())
        (tmp_path / "in" / cls / "notes.jpg").write_text("not a photo")
    cfg = ImagesConfig.model_validate(dict(input=str(tmp_path / "in"), output=str(tmp_path / "o.lance"), size=16, executor="local"))
    with pytest.raises(TooManyRejects, match=r"2 of 4 rows rejected \(50.0%\)"):
        run_decode_images(cfg)
    assert lance.dataset(cfg.rejects_uri).count_rows() == 2 and not lance_tables.table_exists(cfg.output)
    assert run_decode_images(cfg.model_copy(update={"max_reject_fraction": 0.5}))["rows_written"] == 2
