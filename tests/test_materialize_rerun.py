"""Reruns that repair, and a kill at every commit point (issue 21: #4 and the kill points), local executor and s3://."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lance
import numpy as np
import pytest

import tables
from prep.contracts.manifest import split_path
from prep.io.materialized import read_done, read_manifest
from prep.io import storage
from prep.materialize import materialize_mixture, materialize_shuffle
from prep.materialize.faults import KILL_ENV, KILLED_EXIT, POINTS
from prep.materialize.verify import verify
from prep.plan.spec import MixtureSource, MixtureSpec, PlanSpec

REPO = Path(__file__).resolve().parent.parent
PLAN = dict(epochs=2, splits=4, seed=3, filter="length > 25")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> str:
    return tables.synthetic_table(str(tmp_path_factory.mktemp("src") / "syn.lance"), num_rows=1500, max_len=40,
                                  fragment_rows=600)


def shuffle(table: str, out: str, **kw):
    return materialize_shuffle(table=table, output=out, executor="local", num_cpus=1, **PLAN, **kw)


@pytest.fixture(scope="module")
def reference(synthetic, tmp_path_factory) -> str:
    """An uninterrupted run of the plan the tests damage or interrupt."""
    out = str(tmp_path_factory.mktemp("ref") / "out")
    shuffle(synthetic, out)
    return out


def split_ids(out: str, epoch: int, split: int, s3=None) -> np.ndarray:
    uri = storage.join(out, split_path(epoch, split))
    return lance.dataset(uri, storage_options=storage.lance_storage_options(uri, s3)).to_table(columns=["id"])["id"].to_numpy()


def same_output(out: str, reference: str, s3=None) -> None:
    """Same manifest (so the same content checksums), same ids in every split, and it verifies."""
    a, b = read_manifest(out, s3), read_manifest(reference, s3)
    assert a.to_json() == b.to_json()
    for e in a.epochs:
        for s in e.splits:
            assert np.array_equal(split_ids(out, e.epoch, s.split, s3), split_ids(reference, e.epoch, s.split, s3))
    assert verify(out, s3=s3).ok
    assert not storage.exists(storage.join(out, "_work"), s3)


@contextlib.contextmanager
def warnings_of(name: str):
    """The warnings logged to ``name`` meanwhile (this suite runs without pytest's log capture)."""
    said: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    try:
        yield said
    finally:
        logger.removeHandler(handler)


def _damage_delete(split: Path) -> None:
    shutil.rmtree(split)


def _damage_truncate(split: Path) -> None:
    data = next((split / "data").iterdir())
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size // 2)


def _damage_replace(split: Path) -> None:
    """Another dataset at the split's path: fewer rows (what the done record says no longer holds)."""
    table = lance.dataset(str(split)).to_table()
    shutil.rmtree(split)
    lance.write_dataset(table.slice(0, 5), str(split), data_storage_version="2.0")


def _damage_versions(split: Path) -> None:
    shutil.rmtree(split / "_versions")


@pytest.mark.parametrize("damage", [_damage_delete, _damage_truncate, _damage_replace, _damage_versions],
                         ids=["deleted", "truncated", "replaced", "no-versions"])
def test_a_rerun_rewrites_a_split_that_is_missing_or_damaged_and_verify_passes(synthetic, reference, tmp_path, damage):
    out = tmp_path / "out"
    shuffle(synthetic, str(out))
    damage(out / split_path(1, 2))
    assert not verify(str(out)).ok
    with warnings_of("prep.materialize") as said:
        shuffle(synthetic, str(out))
    assert [m for m in said if m.startswith("epoch 1 split 2: ") and m.endswith("; writing it again")], said
    assert read_done(str(out), 1, 2) is not None
    same_output(str(out), reference)


def test_a_rerun_of_a_whole_output_checks_every_split_and_writes_none(synthetic, tmp_path):
    out = str(tmp_path / "out")
    shuffle(synthetic, out)
    before = {p: p.stat().st_mtime_ns for p in Path(out).rglob("*") if p.is_file() and ".lance" in str(p)}
    shuffle(synthetic, out)
    assert {p: p.stat().st_mtime_ns for p in Path(out).rglob("*") if p.is_file() and ".lance" in str(p)} == before


@pytest.mark.s3
@pytest.mark.slow
def test_a_deleted_or_flipped_split_on_s3_is_rewritten_by_the_rerun(synthetic, reference, s3_env, s3_bucket):
    out = f"s3://{s3_bucket}/epochs"
    shuffle(synthetic, out)
    fs, root = storage.filesystem(storage.join(out, split_path(0, 1)))
    fs.rm(root, recursive=True)
    assert not verify(out).ok
    shuffle(synthetic, out)
    assert verify(out).ok
    data = fs.find(f"{root}/data")[0]  # issue 31 #1: flipped bytes, the same size
    flipped = bytearray(fs.cat_file(data))
    flipped[len(flipped) // 2] ^= 0xFF
    fs.pipe_file(data, bytes(flipped))
    assert not verify(out).ok
    shuffle(synthetic, out)
    assert verify(out).ok
    assert [s.checksum for e in read_manifest(out).epochs for s in e.splits] == \
        [s.checksum for e in read_manifest(reference).epochs for s in e.splits]


def _cli(args: list[str], kill: str) -> subprocess.CompletedProcess:
    """``prep *args`` in a child process that ``PREP_TEST_KILL=kill`` ends at a commit point."""
    env = {**os.environ, "PYTHONPATH": str(REPO), KILL_ENV: kill}
    return subprocess.run([sys.executable, "-m", "prep", *args], env=env, capture_output=True, text=True, timeout=300)


# (point, arrival): the third split and done record land mid-epoch 0 (4 splits an epoch, one thread). Each kill costs
# a child process (~5 s here): one mid-epoch kill runs by default, the others are marked slow.
KILLS = [pytest.param(point, nth, id=f"{point}-{nth}", marks=[] if point == "done" else [pytest.mark.slow])
         for point, nth in [("marker", 1), ("selection", 1), ("split", 3), ("done", 3), ("split", 6), ("manifest", 1)]]


def test_every_commit_point_is_a_kill_point():
    # "spill" (a spilled segment of a run beyond its memory budget): tests/test_materialize_budget.py
    assert {k.values[0] for k in KILLS} | {"spill"} == POINTS


@pytest.mark.parametrize("point,nth", KILLS)
def test_a_kill_at_each_commit_point_then_the_plain_rerun_writes_what_an_uninterrupted_run_writes(synthetic, reference,
                                                                                                 tmp_path, point, nth):
    out = str(tmp_path / "out")
    killed = _cli(["materialize-shuffle", "--table", synthetic, "--output", out, "--epochs", "2", "--splits", "4",
                   "--seed", "3", "--filter", "length > 25", "--executor", "local", "--num-cpus", "1"], f"{point}:{nth}")
    assert killed.returncode == KILLED_EXIT, killed.stderr[-2000:]
    assert os.path.exists(os.path.join(out, "manifest.json")) == (point == "manifest")
    shuffle(synthetic, out)  # the plain rerun (the same call the command makes)
    same_output(out, reference)


@pytest.mark.slow
def test_a_kill_after_a_mixtures_done_record_then_the_rerun_writes_what_an_uninterrupted_run_writes(synthetic, tmp_path):
    other = tables.synthetic_table(str(tmp_path / "other.lance"), num_rows=300, seed=1, max_len=40)
    mix = tmp_path / "mix.yaml"
    mix.write_text(f"weight_by: rows\nglobal_batch: 8\nepoch_rows: 400\nsources:\n  - {{table: {synthetic}, weight: 3}}\n"
                   f"  - {{table: {other}, weight: 1}}\n")
    plan = PlanSpec(num_splits=4, mixture=MixtureSpec(
        sources=(MixtureSource(table=synthetic, weight=3), MixtureSource(table=other, weight=1)),
        weight_by="rows", global_batch=8, epoch_rows=400))
    materialize_mixture(mixture=plan, output=str(tmp_path / "ref"), epochs=2, executor="local")
    out = str(tmp_path / "out")
    args = ["materialize-shuffle", "--mixture", str(mix), "--output", out, "--epochs", "2", "--splits", "4",
            "--executor", "local", "--num-cpus", "1"]
    killed = _cli(args, kill="done:5")
    assert killed.returncode == KILLED_EXIT, killed.stderr[-2000:]
    assert len(list(Path(out).glob("epoch-*/*.done.json"))) == 5
    materialize_mixture(mixture=str(mix), output=out, epochs=2, splits=4, executor="local", num_cpus=1)
    same_output(out, str(tmp_path / "ref"))


def test_a_done_record_is_one_typed_form_and_a_bad_one_is_rewritten(synthetic, tmp_path):
    out = tmp_path / "out"
    shuffle(synthetic, str(out))
    record = read_done(str(out), 0, 1)
    assert record.num_rows == read_manifest(str(out)).epoch(0).splits[1].num_rows and record.files
    path = out / "epoch-00000" / "split-00001.done.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "num_rows": -1}))
    with pytest.raises(Exception, match=r"split-00001.done.json: done record: num_rows=-1 must be an integer >= 0"):
        read_done(str(out), 0, 1)
    shuffle(synthetic, str(out))
    again = read_done(str(out), 0, 1)
    assert (again.num_rows, again.checksum) == (record.num_rows, record.checksum)


def _flip_data(split: Path) -> None:
    """10 bytes flipped inside the split's data file: the same size, other content (issue 31 #1)."""
    tables.flip_bytes(next((split / "data").glob("*.lance")))


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
def test_flipped_bytes_in_a_split_are_repaired_by_the_rerun(synthetic, reference, tmp_path, overwrite):
    out = tmp_path / "out"
    shuffle(synthetic, str(out))
    _flip_data(out / split_path(0, 1))
    assert not verify(str(out)).ok
    with warnings_of("prep.materialize") as said:
        shuffle(synthetic, str(out), overwrite=overwrite)
    assert [m for m in said if m.startswith("epoch 0 split 1: ") and "checksum" in m], said
    same_output(str(out), reference)


def test_flipped_bytes_in_a_mixture_split_are_repaired_by_the_plain_rerun(synthetic, tmp_path):
    other = tables.synthetic_table(str(tmp_path / "other.lance"), num_rows=300, seed=1, max_len=40)
    plan = PlanSpec(num_splits=4, mixture=MixtureSpec(
        sources=(MixtureSource(table=synthetic, weight=3), MixtureSource(table=other, weight=1)),
        weight_by="rows", global_batch=8, epoch_rows=400))
    ref, out = str(tmp_path / "ref"), tmp_path / "out"
    for where in (ref, str(out)):
        materialize_mixture(mixture=plan, output=where, epochs=1, executor="local", num_cpus=1)
    _flip_data(out / split_path(0, 2))
    report = verify(str(out))
    assert not report.ok and report.damaged_splits == ["epoch 0 split 2"]
    assert "rerun: prep materialize-shuffle --mixture <the mixture file it was written from> --output" in report.repair_line()
    materialize_mixture(mixture=plan, output=str(out), epochs=1, executor="local", num_cpus=1)
    same_output(str(out), ref)
