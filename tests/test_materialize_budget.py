"""Materialize within a memory budget (``--max-memory``): the same epochs at every budget, executor and node
count; rows beyond the budget go through the spill (prep/materialize/rows/spill.py), which survives kills, a full
disk and never removes what prep did not write."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tables
from prep.cli import main as cli_main
from prep.contracts.manifest import Manifest
from prep.errors import PrepError
from prep.materialize import materialize_shuffle
from prep.materialize.rows import spill
from prep.materialize.budget import Budget, parse_size
from prep.materialize.verify import verify

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> str:
    """~1.1 MB of rows in three fragments: 1 MiB (the smallest budget) holds a third of it at most."""
    uri = str(tmp_path_factory.mktemp("src") / "syn.lance")
    return tables.synthetic_table(uri, num_rows=6000, max_len=60, fragment_rows=2000)


@pytest.fixture(scope="module")
def unbounded() -> dict:
    """Each plan of the tests, materialized once with the default budget (everything held)."""
    return {}


def _reference(unbounded: dict, synthetic: str, tmp_path_factory, **kw) -> tuple[str, Manifest]:
    key = tuple(sorted(kw.items()))
    if key not in unbounded:
        out = str(tmp_path_factory.mktemp("whole") / "out")
        unbounded[key] = (out, materialize_shuffle(table=synthetic, output=out, executor="local", **kw))
    return unbounded[key]


def _spilled(monkeypatch) -> list[str]:
    """Records the spill folder of each spilling run (the spill path really ran)."""
    roots: list[str] = []
    real = spill.open_spill
    monkeypatch.setattr(spill, "open_spill", lambda root, layout, s3: roots.append(root) or real(root, layout, s3))
    return roots


PLANS = [
    dict(splits=7, strategy="random", clump=1),  # groups of splits
    dict(splits=7, strategy="hash", clump=1),
    dict(splits=2, strategy="random", clump=1),  # each split above the budget: written in parts
    dict(splits=6, strategy="round-robin", clump=3, filter="length > 20"),
    dict(splits=5, strategy="random", clump=64),  # large clumps: taken from the table, nothing spilled
]


@pytest.mark.parametrize("kw", PLANS, ids=lambda kw: "-".join(f"{v}" for v in kw.values()))
def test_a_local_run_within_a_tiny_budget_writes_the_unbounded_run_s_epochs(synthetic, unbounded, tmp_path_factory,
                                                                           tmp_path, monkeypatch, kw):
    kw = dict(epochs=2, read_rows=300, **kw)
    whole_out, whole = _reference(unbounded, synthetic, tmp_path_factory, **kw)
    roots = _spilled(monkeypatch)
    out = str(tmp_path / "bounded")
    bounded = materialize_shuffle(table=synthetic, output=out, executor="local", max_memory="1MiB", **kw)
    tables.same_output(whole_out, out, whole, bounded)
    assert roots == ([] if kw["clump"] >= 16 else [os.path.join(out, "_work", "spill")])
    assert sorted(os.listdir(out)) == ["_prep_job.json", "epoch-00000", "epoch-00001", "manifest.json"]  # spill removed


@pytest.mark.parametrize("nodes", [1, 2])
def test_ray_within_a_tiny_budget_finishes_with_the_same_epochs(synthetic, unbounded, tmp_path_factory, tmp_path,
                                                              monkeypatch, ray_local, nodes):
    """A one-node Ray with more groups than nodes used to hang (holder tasks waiting for CPUs the driver's
    reservation held); two nodes (mocked: both are this machine) share the route and the groups."""
    from prep.materialize.executors import on_ray

    kw = dict(epochs=2, read_rows=300, splits=7, strategy="random", clump=1)
    whole_out, whole = _reference(unbounded, synthetic, tmp_path_factory, **kw)
    if nodes == 2:
        monkeypatch.setattr(on_ray, "_nodes_cpus", lambda resources: [1, 1])
    seen: list[list[str]] = []
    real = on_ray.RayExecutor.run_holders
    monkeypatch.setattr(on_ray.RayExecutor, "run_holders",
                        lambda self, calls, on_done=lambda: None: seen.append([c.where for c in calls]) or real(self, calls, on_done))
    roots = _spilled(monkeypatch)
    out = str(tmp_path / "ray")
    bounded = materialize_shuffle(table=synthetic, output=out, executor="ray", max_memory="1MiB", **kw)
    tables.same_output(whole_out, out, whole, bounded)
    assert len(roots) == 1
    assert seen[0] == ["spilling rows"] * nodes  # every row read once, each node a share of the segments
    assert len(seen[1]) > nodes  # more groups than nodes


def test_the_budget_flag_parses_sizes_and_refuses_nonsense(synthetic, tmp_path, capsys):
    assert parse_size("512MiB") == 512 << 20 and parse_size("8GiB") == 8 << 30 and parse_size("4mib") == 4 << 20
    for bad in ("lots", "12 parsecs", "100KiB"):
        with pytest.raises(PrepError, match="max_memory="):
            parse_size(bad)
    assert cli_main(["materialize-shuffle", "--table", synthetic, "--output", str(tmp_path / "o"), "--epochs", "1",
                     "--max-memory", "lots"]) == 2
    assert "--max-memory: max_memory='lots' is not a size" in capsys.readouterr().err
    assert Budget(3 << 30).hold_bytes == 1 << 30


def test_the_cli_takes_max_memory_and_spill_dir_and_leaves_the_user_s_files(synthetic, unbounded, tmp_path_factory,
                                                                           tmp_path):
    kw = dict(epochs=1, read_rows=300, splits=7, strategy="random", clump=1)
    whole_out, whole = _reference(unbounded, synthetic, tmp_path_factory, **kw)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "mine.txt").write_text("the user's")
    out = tmp_path / "out"
    rc = cli_main(["materialize-shuffle", "--table", synthetic, "--output", str(out), "--epochs", "1", "--splits", "7",
                   "--read-rows", "300", "--executor", "local", "--max-memory", "1MiB", "--spill-dir", str(scratch)])
    assert rc == 0
    assert sorted(os.listdir(scratch)) == ["mine.txt"] and (scratch / "mine.txt").read_text() == "the user's"
    from prep.io.materialized import read_manifest

    tables.same_output(whole_out, str(out), whole, read_manifest(str(out)))


def test_a_spill_folder_prep_did_not_write_is_refused(synthetic, tmp_path):
    scratch = tmp_path / "scratch"
    kw = dict(table=synthetic, epochs=1, splits=7, executor="local", max_memory="1MiB", spill_dir=str(scratch))
    probe = materialize_shuffle(output=str(tmp_path / "probe"), **kw)  # the folder is named by the plan, not the output
    theirs = scratch / (spill.SPILL_PREFIX + probe.fingerprint)
    theirs.mkdir(parents=True)
    (theirs / "notes.txt").write_text("keep me")
    with pytest.raises(PrepError, match="was not written by prep"):
        materialize_shuffle(output=str(tmp_path / "out"), **kw)
    assert (theirs / "notes.txt").read_text() == "keep me"


def test_a_run_killed_while_spilling_is_finished_by_its_rerun(synthetic, unbounded, tmp_path_factory, tmp_path):
    kw = dict(epochs=2, read_rows=300, splits=7, strategy="random", clump=1)
    whole_out, whole = _reference(unbounded, synthetic, tmp_path_factory, **kw)
    out = tmp_path / "killed"
    args = ["materialize-shuffle", "--table", synthetic, "--output", str(out), "--epochs", "2", "--splits", "7",
            "--read-rows", "300", "--executor", "local", "--max-memory", "1MiB", "--num-cpus", "1"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-m", "prep", *args], env={**env, "PREP_TEST_KILL": "spill"}, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 137, proc.stderr[-2000:]
    root = out / "_work" / "spill"
    assert [p.name for p in root.glob("seg-*.done")] == ["seg-000000.done"]  # one segment finished, then the kill
    finished = {p: p.stat().st_mtime_ns for p in (root / "seg-000000").iterdir()}
    resumed = materialize_shuffle(table=synthetic, output=str(out), executor="local", max_memory="1MiB", num_cpus=1, **kw)
    tables.same_output(whole_out, str(out), whole, resumed)
    assert not root.exists() and finished  # the kept segment served the rerun; the spill is gone after it


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A 256 KiB tmpfs (root only, as CI runs here): a real device that fills up."""
    where = tmp_path / "small-disk"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield where
    subprocess.run(["umount", "--lazy", str(where)], check=True)


def test_a_full_disk_while_spilling_is_one_line_and_leaves_the_output_as_it_was(synthetic, tmp_path, small_disk):
    out = tmp_path / "out"
    with pytest.raises(PrepError, match=r"no space left on the device of .*small-disk/prep-spill-\w+ while spilling rows "
                                        r"\[\d+, \d+\): free space there or pass --spill-dir"):
        materialize_shuffle(table=synthetic, output=str(out), epochs=1, splits=7, executor="local", max_memory="1MiB",
                            spill_dir=str(small_disk))
    assert os.listdir(small_disk) == []  # the spill is gone
    assert sorted(os.listdir(out)) == ["_prep_job.json"]  # no split, no manifest: rerun with room to finish


def test_a_mixture_and_verify_within_a_tiny_budget(synthetic, tmp_path):
    from prep.materialize import materialize_mixture
    from prep.plan.spec import MixtureSource, MixtureSpec, PlanSpec

    other = tables.synthetic_table(str(tmp_path / "other.lance"), num_rows=3000, max_len=40, seed=3)
    mix = PlanSpec(num_splits=4, mixture=MixtureSpec(global_batch=8, weight_by="rows", epoch_rows=2000, sources=(
        MixtureSource(table=synthetic, weight=3.0), MixtureSource(table=other, weight=1.0))))
    whole = materialize_mixture(mixture=mix, output=str(tmp_path / "whole"), epochs=1, executor="local")
    small = materialize_mixture(mixture=mix, output=str(tmp_path / "small"), epochs=1, executor="local", max_memory="1MiB")
    assert [e.splits for e in small.epochs] == [e.splits for e in whole.epochs]
    assert verify(str(tmp_path / "small")).ok
