"""materialize-shuffle on real Lance tables and a real local Ray (2 CPUs)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import tables
from prep import plan
from prep.plan import order
from prep.cli import main as cli_main
from prep.errors import PrepError
from prep.contracts.manifest import Manifest, split_path
from prep.io.materialized import read_manifest
from prep.materialize import materialize_shuffle
from prep.plan.spec import PlanSpec
from prep.materialize.verify import verify

pytestmark = pytest.mark.usefixtures("ray_local")

VENV_BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gsm(tmp_path_factory) -> str:
    """400 GSM8K rows tokenized with the real tokenizer, in 3 fragments."""
    if not tables.have_real_data():
        pytest.skip(f"real data not found at {tables.SHARED_DATA}")
    uri = str(tmp_path_factory.mktemp("src") / "gsm8k.lance")
    return tables.write_prepared(uri, tables.gsm8k_rows(400), fragment_rows=150)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("src") / "syn.lance")
    return tables.synthetic_table(uri, num_rows=6000, max_len=60, fragment_rows=2000)


def split_ids(out: str, epoch: int, split: int) -> np.ndarray:
    return lance.dataset(os.path.join(out, split_path(epoch, split))).to_table(columns=["id"]).column("id").to_numpy()


def epoch_ids(out: str, epoch: int, splits: int) -> list[np.ndarray]:
    return [split_ids(out, epoch, s) for s in range(splits)]


def checksums(manifest: Manifest) -> dict:
    return {(e.epoch, s.split): s.checksum for e in manifest.epochs for s in e.splits}


@pytest.mark.parametrize(
    "strategy,clump", [("random", 1), ("random", 32), ("hash", 1), ("sequential", 4), ("round-robin", 1), ("round-robin", 16)]
)
def test_materialized_epochs_follow_the_plan(gsm, tmp_path, strategy, clump):
    out = str(tmp_path / "out")
    m = materialize_shuffle(table=gsm, output=out, epochs=2, splits=8, strategy=strategy, clump=clump, seed=7)
    source_ids = lance.dataset(gsm).to_table(columns=["id"]).column("id").to_numpy()
    keys = source_ids if strategy == "hash" else None
    epochs = [epoch_ids(out, e, 8) for e in range(2)]
    for e, parts in enumerate(epochs):
        # every selected row exactly once per epoch, each split exactly the plan's rows in the plan's order
        assert np.array_equal(np.sort(np.concatenate(parts)), np.sort(source_ids))
        for s, ids in enumerate(parts):
            rows = plan.split_rows(num_rows=400, num_splits=8, split=s, epoch=e, strategy=strategy, seed=7, clump=clump, hash_keys=keys)
            assert np.array_equal(ids, source_ids[rows])
            assert m.epoch(e).splits[s].num_rows == len(ids)
    assert all(set(epochs[0][s]) == set(epochs[1][s]) for s in range(8))  # membership fixed
    assert any(not np.array_equal(epochs[0][s], epochs[1][s]) for s in range(8))  # order changes
    assert verify(out).ok


def test_manifest_follows_the_contract(gsm, tmp_path):
    out = str(tmp_path / "out")
    materialize_shuffle(table=gsm, output=out, epochs=1, splits=4)
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert m["format"] == "prep.materialized/2" and len(m["fingerprint"]) == 16
    assert [(e["version"], e["num_selected_rows"]) for e in m["epochs"]] == [(1, 400)]
    assert m["source"]["uri"] == gsm and m["source"]["num_rows"] == 400 and m["source"]["metadata"]["kind"] == "sft"
    assert m["plan"] == {"num_splits": 4, "strategy": "random", "hash_columns": ["id"], "clump": 1, "seed": 0,
                         "filter": None, "columns": None}
    assert m["num_selected_rows"] == 400 and m["columns"] == ["id", "input_ids", "loss_mask", "length"]
    assert m["fingerprint"] == PlanSpec(num_splits=4).fingerprint(gsm, m["source"]["version"])
    assert read_manifest(out).to_json() == m  # the typed manifest reads back exactly what was written
    assert [s["path"] for s in m["epochs"][0]["splits"]] == [f"epoch-00000/split-0000{i}.lance" for i in range(4)]
    assert not (tmp_path / "out" / "_work").exists()
    # the written rows are the source rows, all columns, unchanged
    got = lance.dataset(str(tmp_path / "out" / "epoch-00000" / "split-00002.lance")).to_table()
    src = lance.dataset(gsm).to_table()
    ids = src.column("id").to_numpy()
    where = np.searchsorted(np.sort(ids), got.column("id").to_numpy())
    assert got.equals(src.take(pa.array(np.argsort(ids)[where])))


def test_same_seed_gives_identical_content_and_other_seed_differs(synthetic, tmp_path):
    a = materialize_shuffle(table=synthetic, output=str(tmp_path / "a"), epochs=1, splits=6, seed=3)
    b = materialize_shuffle(table=synthetic, output=str(tmp_path / "b"), epochs=1, splits=6, seed=3)
    c = materialize_shuffle(table=synthetic, output=str(tmp_path / "c"), epochs=1, splits=6, seed=4)
    assert checksums(a) == checksums(b)
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert set(checksums(a).values()).isdisjoint(checksums(c).values())


def test_elastic_determinism_on_materialized_splits(synthetic, tmp_path):
    out = str(tmp_path / "out")
    materialize_shuffle(table=synthetic, output=out, epochs=1, splits=48, seed=1)
    parts = epoch_ids(out, 0, 48)
    global_batch = 96
    b = global_batch // 48  # 48 divides the global batch: every split gives b rows a step, as before
    steps = min(len(p) for p in parts) // b
    assert steps > 10
    reference = None
    for w in [1, 2, 3, 4, 6, 8, 12, 16, 24, 48]:
        per_step = []
        for t in range(steps):
            batch = [parts[s][t * b : (t + 1) * b] for r in range(w) for s in order.splits_for_rank(48, r, w)]
            ids = np.concatenate(batch)
            assert len(ids) == global_batch
            per_step.append(frozenset(ids.tolist()))
        reference = reference or per_step
        assert per_step == reference
    with pytest.raises(PrepError, match="does not divide num_splits=48"):
        order.splits_for_rank(48, 0, 5)
    with pytest.raises(PrepError, match="does not divide global_batch_size=100"):
        order.Share(100, 48, world_size=8)


def test_filter_materializes_only_matching_rows_and_counts_them(gsm, tmp_path):
    out = str(tmp_path / "out")
    m = materialize_shuffle(table=gsm, output=out, epochs=2, splits=4, filter="length > 150", columns=["id", "length"])
    src = lance.dataset(gsm).to_table(columns=["id", "length"], filter="length > 150")
    assert 0 < m.num_selected_rows == src.num_rows < 400
    assert m.columns == ("id", "length")
    for e in range(2):
        got = pa.concat_tables(
            [lance.dataset(os.path.join(out, split_path(e, s))).to_table() for s in range(4)]
        )
        assert got.schema.names == ["id", "length"]
        assert sorted(got.column("id").to_pylist()) == sorted(src.column("id").to_pylist())
        assert min(got.column("length").to_pylist()) > 150
    assert verify(out).ok


def test_extending_epochs_adds_only_the_new_ones(synthetic, tmp_path):
    out = tmp_path / "out"
    first = materialize_shuffle(table=synthetic, output=str(out), epochs=2, splits=4)
    before = {p: os.stat(p).st_mtime_ns for p in glob.glob(f"{out}/epoch-0000[01]/**", recursive=True)}
    second = materialize_shuffle(table=synthetic, output=str(out), epochs=3, splits=4)
    assert [e.epoch for e in second.epochs] == [0, 1, 2]
    assert {p: os.stat(p).st_mtime_ns for p in before} == before
    assert {k: v for k, v in checksums(second).items() if k[0] < 2} == checksums(first)
    third = materialize_shuffle(table=synthetic, output=str(out), epochs=1, start_epoch=4, splits=4)
    assert [e.epoch for e in third.epochs] == [0, 1, 2, 4]
    assert verify(str(out)).ok


def test_rerunning_a_finished_run_writes_nothing(synthetic, tmp_path):
    out = tmp_path / "out"
    materialize_shuffle(table=synthetic, output=str(out), epochs=1, splits=4)
    before = {p: os.stat(p).st_mtime_ns for p in glob.glob(f"{out}/epoch-*/**", recursive=True)}
    materialize_shuffle(table=synthetic, output=str(out), epochs=1, splits=4)
    assert {p: os.stat(p).st_mtime_ns for p in before} == before


@pytest.mark.slow
def test_sigkill_mid_epoch_then_rerun_matches_an_uninterrupted_run(synthetic, tmp_path, ray_local):
    out = tmp_path / "killed"
    # the killed driver joins this session's Ray, as a `ray job submit` driver joins its cluster
    args = ["materialize-shuffle", "--table", synthetic, "--output", str(out), "--epochs", "2", "--splits", "16",
            "--read-rows", "256", "--ray-address", ray_local.get_runtime_context().gcs_address]
    tables.kill_midway(args, out)
    done = _settled(f"{out}/epoch-*/*.done.json")  # Ray stops the dead driver's tasks
    assert 2 <= len(done) < 32, "not killed mid-run"
    assert not (out / "manifest.json").exists()  # no epoch looks complete
    # the rerun (same command, here in-process) finishes only what is missing
    survivors = {p: os.stat(p).st_mtime_ns for p in done}
    resumed = materialize_shuffle(table=synthetic, output=str(out), epochs=2, splits=16, read_rows=256)
    assert {p: os.stat(p).st_mtime_ns for p in survivors} == survivors
    clean = materialize_shuffle(table=synthetic, output=str(tmp_path / "clean"), epochs=2, splits=16)
    assert checksums(resumed) == checksums(clean)
    assert all(np.array_equal(split_ids(str(out), e, s), split_ids(str(tmp_path / "clean"), e, s)) for e in range(2) for s in range(16))
    assert verify(str(out)).ok


def _settled(pattern: str, quiet: float = 1.0) -> list[str]:
    """The files matching ``pattern`` once none has appeared for ``quiet`` seconds."""
    found, since = glob.glob(pattern), time.time()
    while time.time() - since < quiet:
        time.sleep(0.05)
        now = glob.glob(pattern)
        if len(now) != len(found):
            found, since = now, time.time()
    return found


# ---------------------------------------------------------------- bad input


def test_missing_table_path_is_a_clear_error(tmp_path):
    with pytest.raises(PrepError, match="no such path"):
        materialize_shuffle(table=str(tmp_path / "nope.lance"), output=str(tmp_path / "o"), epochs=1)


def test_empty_table_is_a_clear_error(tmp_path):
    uri = tables.write_prepared(str(tmp_path / "empty.lance"), tables.SCHEMA.empty_table())
    with pytest.raises(PrepError, match="is empty"):
        materialize_shuffle(table=uri, output=str(tmp_path / "o"), epochs=1)


def test_filter_matching_nothing_is_a_clear_error(gsm, tmp_path):
    with pytest.raises(PrepError, match="matched none of the 400 rows"):
        materialize_shuffle(table=gsm, output=str(tmp_path / "o"), epochs=1, filter="length < 0")


def test_filter_syntax_error_is_a_clear_error(gsm, tmp_path):
    with pytest.raises(PrepError, match="not a valid filter"):
        materialize_shuffle(table=gsm, output=str(tmp_path / "o"), epochs=1, filter="length >>> 3")
    with pytest.raises(PrepError, match="not a valid filter"):
        materialize_shuffle(table=gsm, output=str(tmp_path / "o2"), epochs=1, filter="no_such_column = 3")


def test_zero_splits_is_refused_by_the_cli(gsm, tmp_path, capsys):
    code = cli_main(["materialize-shuffle", "--table", gsm, "--output", str(tmp_path / "o"), "--epochs", "1", "--splits", "0"])
    assert code == 2
    assert "argument --splits: 0 must be >= 1" in capsys.readouterr().err


def test_output_holding_a_different_plan_is_refused_unless_overwrite(synthetic, tmp_path):
    out = str(tmp_path / "out")
    materialize_shuffle(table=synthetic, output=out, epochs=1, splits=4, seed=0)
    with pytest.raises(PrepError, match=r"holds a different plan .*seed 0 -> 1.*--overwrite"):
        materialize_shuffle(table=synthetic, output=out, epochs=1, splits=4, seed=1)
    m = materialize_shuffle(table=synthetic, output=out, epochs=1, splits=4, seed=1, overwrite=True)
    assert m.plan.seed == 1 and verify(out).ok
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(PrepError, match="is not empty and holds no prep materialized output"):
            materialize_shuffle(table=synthetic, output=str(tmp_path / "other"), epochs=1, overwrite=overwrite)
    assert os.listdir(tmp_path / "other") == ["notes.txt"]


def test_overwrite_and_extending_remove_only_what_materialize_wrote(synthetic, tmp_path):
    out = tmp_path / "out"
    materialize_shuffle(table=synthetic, output=str(out), epochs=1, splits=4, seed=0)
    mine = {"notes.txt": b"keep", "epoch-00000/split-00000.csv": b"mine", "epoch-00009/x": b"mine too"}
    for rel, data in mine.items():
        (out / rel).parent.mkdir(exist_ok=True)
        (out / rel).write_bytes(data)
    materialize_shuffle(table=synthetic, output=str(out), epochs=2, splits=4, seed=0)  # extends: adds epoch 1
    m = materialize_shuffle(table=synthetic, output=str(out), epochs=1, splits=4, seed=1, start_epoch=3, overwrite=True)
    assert [e.epoch for e in m.epochs] == [3] and verify(str(out)).ok
    assert {rel: (out / rel).read_bytes() for rel in mine} == mine
    assert not (out / "epoch-00001").exists() and sorted(os.listdir(out / "epoch-00000")) == ["split-00000.csv"]


def test_a_damaged_done_record_is_rewritten_not_trusted(synthetic, tmp_path):
    out = tmp_path / "out"
    first = materialize_shuffle(table=synthetic, output=str(out), epochs=1, splits=4)
    (out / "epoch-00000" / "split-00002.done.json").write_text("{")
    (out / "manifest.json").unlink()
    again = materialize_shuffle(table=synthetic, output=str(out), epochs=1, splits=4)
    assert checksums(again) == checksums(first) and verify(str(out)).ok


def test_source_that_changed_version_is_noticed(tmp_path, capsys):
    uri = tables.synthetic_table(str(tmp_path / "t.lance"), num_rows=500)
    out = str(tmp_path / "out")
    materialize_shuffle(table=uri, output=out, epochs=1, splits=4)
    lance.write_dataset(lance.dataset(uri).to_table().slice(0, 10), uri, mode="append")
    report = verify(out)  # checked against the version it drew from, which Lance keeps
    assert report.ok and "is at version 2 now" in report.notes[0]
    assert cli_main(["verify", out]) == 0
    assert "OK" in capsys.readouterr().out
    with pytest.raises(PrepError, match="is at version 2, the epochs in .* drew from version 1: pass --extend"):
        materialize_shuffle(table=uri, output=out, epochs=2, splits=4)


def test_verify_notices_a_tampered_split(synthetic, tmp_path):
    out = str(tmp_path / "out")
    materialize_shuffle(table=synthetic, output=out, epochs=1, splits=4)
    uri = os.path.join(out, split_path(0, 1))
    t = lance.dataset(uri).to_table()
    lance.write_dataset(t.slice(1), uri, mode="overwrite")
    report = verify(out)
    assert not report.ok
    text = "\n".join(report.problems)
    assert "epoch 0 split 1" in text and "rows on disk" in text and "checksum" in text


# ---------------------------------------------------------------- entry points


@pytest.mark.slow
def test_pipeline_script_runs_like_the_cli(synthetic, tmp_path, ray_local):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(REPO / "pipelines" / "materialize_shuffle.py"), "--table", synthetic, "--output", str(out),
         "--epochs", "1", "--splits", "4", "--ray-address", ray_local.get_runtime_context().gcs_address],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "epochs 0..0 (1) x 4 splits, 6,000 of 6,000 rows selected" in proc.stdout
    same = materialize_shuffle(table=synthetic, output=str(tmp_path / "same"), epochs=1, splits=4)
    assert checksums(read_manifest(str(out))) == checksums(same)


@pytest.mark.ray_cluster
@pytest.mark.slow
def test_ray_job_submit_runs_the_pipeline_on_a_real_head(ray_head, synthetic, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(VENV_BIN / "ray"), "job", "submit", "--address", ray_head.address, "--working-dir", str(REPO), "--",
         "python", "pipelines/materialize_shuffle.py", "--table", synthetic, "--output", str(out), "--epochs", "2",
         "--splits", "4", "--clump", "8"],
        env=ray_head.env, cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert verify(str(out)).ok
