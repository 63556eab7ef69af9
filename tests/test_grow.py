"""Training goes on on a grown table (issue 18): `--extend` adds epochs over the table's newest version,
the old epochs stay as written, verify checks each against its version, a reader resumes across the
boundary; an on-the-fly plan's state pins its version; a mixture names a version per source."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lance
import numpy as np
import pytest

from common.tiny import tiny_prepared
from prep.contracts.manifest import FORMAT, FORMAT_V1, MANIFEST, split_path
from prep.io.materialized import read_manifest
from prep.errors import PrepError
from prep.io import storage
from prep.materialize import materialize_mixture, materialize_shuffle
from prep.materialize.faults import KILL_ENV, KILLED_EXIT
from prep.materialize.verify import verify
from prep.reader import ReaderDataset

REPO = Path(__file__).resolve().parent.parent
RUN = dict(splits=4, seed=5, executor="local", num_cpus=1)


def grow(table: str, tmp: Path, rows: int, seed: int, storage_options: dict | None = None) -> int:
    """Appends ``rows`` new rows (fresh ids) to ``table`` as a new Lance version; returns that version."""
    extra = tiny_prepared(str(tmp / f"extra-{seed}.lance"), num_rows=rows, seed=seed)
    return lance.write_dataset(lance.dataset(extra).to_table(), table, mode="append",
                               storage_options=storage_options).version


def files(out: str, epochs: range) -> dict[str, tuple[bytes, int]]:
    """Every file of ``epochs`` under ``out``: its bytes and mtime."""
    found = {}
    for e in epochs:
        for p in sorted((Path(out) / split_path(e, 0)).parent.rglob("*")):
            if p.is_file():
                found[str(p)] = (p.read_bytes(), p.stat().st_mtime_ns)
    return found


def epoch_ids(out: str, epoch: int, s3: storage.S3Options | None = None) -> np.ndarray:
    m = read_manifest(out, s3)
    parts = []
    for sp in m.epoch(epoch).splits:
        uri = storage.join(out, sp.path)
        parts.append(lance.dataset(uri, storage_options=storage.lance_storage_options(uri, s3))
                     .to_table(columns=["id"]).column("id").to_numpy())
    return np.concatenate(parts)


def table_ids(table: str, version: int | None = None, storage_options: dict | None = None) -> np.ndarray:
    return lance.dataset(table, version=version, storage_options=storage_options).to_table(columns=["id"]).column("id").to_numpy()


@pytest.fixture
def grown(tmp_path):
    """A table of 300 rows materialized as 2 epochs, then grown by 60 rows (version 2)."""
    table = tiny_prepared(str(tmp_path / "t.lance"), num_rows=300)
    out = str(tmp_path / "out")
    first = materialize_shuffle(table=table, output=out, epochs=2, **RUN)
    before = files(out, range(2))
    assert grow(table, tmp_path, 60, seed=7) == 2
    return table, out, first, before


def test_a_newer_version_is_refused_without_extend_naming_both_versions_and_the_flag(grown):
    table, out, _, before = grown
    with pytest.raises(PrepError) as err:
        materialize_shuffle(table=table, output=out, epochs=3, **RUN)
    message = str(err.value)
    assert "\n" not in message and "version 2" in message and "version 1" in message and "--extend" in message
    assert files(out, range(2)) == before


def test_extend_adds_epochs_over_the_new_version_and_never_touches_the_old_ones(grown):
    table, out, first, before = grown
    m = materialize_shuffle(table=table, output=out, epochs=4, extend=True, **RUN)
    assert [(e.epoch, e.version, e.num_selected_rows) for e in m.epochs] == [(0, 1, 300), (1, 1, 300), (2, 2, 360), (3, 2, 360)]
    assert m.fingerprint == first.fingerprint and m.source.version == 2 and m.num_selected_rows == 360
    assert m.epochs[:2] == first.epochs  # the old entries, unchanged
    assert files(out, range(2)) == before  # bytes and mtimes
    doc = json.loads((Path(out) / MANIFEST).read_text())
    assert doc["format"] == FORMAT and [e["version"] for e in doc["epochs"]] == [1, 1, 2, 2]
    old, new = set(table_ids(table, version=1)), set(table_ids(table))
    assert set(epoch_ids(out, 1)) == old and set(epoch_ids(out, 2)) == set(epoch_ids(out, 3)) == new
    assert len(epoch_ids(out, 2)) == 360 and not np.array_equal(epoch_ids(out, 2), epoch_ids(out, 3))
    report = verify(out)
    assert report.ok, report.problems
    assert report.epochs == 4 and report.rows == 2 * 300 + 2 * 360
    # the same command again writes nothing; without --extend it goes on too: the output already drew from version 2
    after = files(out, range(4))
    assert materialize_shuffle(table=table, output=out, epochs=4, extend=True, **RUN) == m
    assert materialize_shuffle(table=table, output=out, epochs=4, **RUN) == m
    assert files(out, range(4)) == after
    grow(table, Path(out).parent, 10, seed=9)
    with pytest.raises(PrepError, match=r"--extend: epochs 0\.\.1 are all in .*--epochs 5"):
        materialize_shuffle(table=table, output=out, epochs=2, extend=True, **RUN)


def test_a_damaged_old_epoch_is_an_error_and_not_rewritten_over_the_new_version(grown):
    table, out, _, _ = grown
    data = next((Path(out) / split_path(1, 2) / "data").iterdir())
    data.unlink()
    with pytest.raises(PrepError, match=r"epoch 1 split 2 \(drawn from version 1 of .*\): .*missing.*does not rewrite it"):
        materialize_shuffle(table=table, output=out, epochs=3, extend=True, **RUN)
    assert not data.exists() and not (Path(out) / "epoch-00002").exists()


def test_an_old_format_manifest_is_read_with_every_epoch_at_the_source_version(grown):
    table, out, first, _ = grown
    doc = first.to_json()
    doc["format"] = FORMAT_V1
    for e in doc["epochs"]:
        del e["version"], e["num_selected_rows"]
    (Path(out) / MANIFEST).write_text(json.dumps(doc))
    m = read_manifest(out)
    assert m == first and [e.version for e in m.epochs] == [1, 1]
    assert verify(out).ok
    assert [e.version for e in materialize_shuffle(table=table, output=out, epochs=3, extend=True, **RUN).epochs] == [1, 1, 2]


def test_a_manifest_whose_epoch_versions_disagree_with_its_source_is_one_line(grown):
    _, out, first, _ = grown
    doc = first.to_json()
    doc["epochs"][1]["version"] = 3
    (Path(out) / MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(PrepError, match=r"source.version=1 is not the newest epoch version 3; rerun"):
        read_manifest(out)
    del doc["epochs"][1]["version"]
    (Path(out) / MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(PrepError, match=r"epoch 1 needs the table version it drew from"):
        read_manifest(out)


def _ids(batches) -> list[np.ndarray]:
    return [b.ids.copy() for b in batches]


def test_a_state_from_the_last_old_epoch_resumes_exactly_into_the_new_ones(grown):
    table, out, _, _ = grown
    before = ReaderDataset(out, global_batch_size=8)
    seen, state = [], None
    for b in before:
        seen.append(b.ids.copy())
        if b.epoch == 1 and b.step == 3:
            state = b.state
            break
    assert state is not None
    m = materialize_shuffle(table=table, output=out, epochs=4, extend=True, **RUN)
    whole = ReaderDataset(out, global_batch_size=8)
    assert whole.steps_per_epoch[2] > whole.steps_per_epoch[1]  # 360 rows against 300
    everything = _ids(whole)
    resumed = ReaderDataset(out, global_batch_size=8)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert (rest[0].epoch, rest[0].step) == (1, 4) and rest[-1].epoch == 3
    assert all(np.array_equal(a, b) for a, b in zip(seen + _ids(rest), everything))
    assert len(seen) + len(rest) == len(everything) == sum(whole.steps_per_epoch.values())
    assert m.fingerprint == state["fingerprint"]


def test_an_on_the_fly_plan_resumes_on_the_version_its_state_pins(tmp_path):
    table = tiny_prepared(str(tmp_path / "t.lance"), num_rows=300)
    plan = {"num_splits": 4, "seed": 2}
    first = ReaderDataset(table, global_batch_size=8, plan=plan, epochs=2)
    everything = _ids(first)
    again = ReaderDataset(table, global_batch_size=8, plan=plan, epochs=2)
    batches = iter(again)
    for _ in range(5):
        state = next(batches).state
    batches.close()
    grow(table, tmp_path, 60, seed=7)
    resumed = ReaderDataset(table, global_batch_size=8, plan=plan, epochs=2)
    assert resumed.layout.source_version == 2 and resumed.layout.num_rows == 360
    resumed.load_state_dict(state)
    assert resumed.layout.source_version == 1 and resumed.state_dict()["source_version"] == 1
    rest = _ids(resumed)
    assert len(rest) == len(everything) - 5 and all(np.array_equal(a, b) for a, b in zip(rest, everything[5:]))
    fresh = ReaderDataset(table, global_batch_size=8, plan=plan, epochs=2)  # no state: the newest version
    assert sum(len(b) for b in _ids(fresh)) > sum(len(b) for b in everything)


def _mixture(path: Path, a: str, b: str, version: str = "") -> str:
    path.write_text(f"weight_by: rows\nglobal_batch: 8\nsources:\n  - {{table: {a}, weight: 1{version}}}\n"
                    f"  - {{table: {b}, weight: 1}}\n")
    return str(path)


def test_a_mixture_source_draws_from_the_version_it_names(tmp_path):
    a = tiny_prepared(str(tmp_path / "a.lance"), num_rows=200, seed=1)
    b = tiny_prepared(str(tmp_path / "b.lance"), num_rows=200, seed=2)
    out = str(tmp_path / "mix")
    run = dict(splits=4, epochs=1, executor="local", num_cpus=1)
    first = materialize_mixture(mixture=_mixture(tmp_path / "m.yaml", a, b), output=out, **run)
    assert [t.version for t in first.mixture] == [1, 1]
    grow(a, tmp_path, 80, seed=9)
    with pytest.raises(PrepError) as err:  # the file draws from the newest version now: another plan
        materialize_mixture(mixture=_mixture(tmp_path / "m.yaml", a, b), output=out, **{**run, "epochs": 2})
    assert "version 1 -> 2" in str(err.value) and "`version: N`" in str(err.value) and "\n" not in str(err.value)
    pinned = _mixture(tmp_path / "m.yaml", a, b, ", version: 1")
    m = materialize_mixture(mixture=pinned, output=out, **{**run, "epochs": 2})
    assert [t.version for t in m.mixture] == [1, 1] and m.mixture[0].num_rows == 200 and m.epochs[0] == first.epochs[0]
    report = verify(out)
    assert report.ok, report.problems
    assert any("is at version 2 now" in n for n in report.notes)
    newest = materialize_mixture(mixture=_mixture(tmp_path / "n.yaml", a, b, ", version: 2"), output=str(tmp_path / "mix2"), **run)
    assert newest.mixture[0].version == 2 and newest.mixture[0].num_rows == 280
    with pytest.raises(PrepError) as err:
        materialize_mixture(mixture=_mixture(tmp_path / "x.yaml", a, b, ", version: 9"), output=str(tmp_path / "mix3"), **run)
    assert "\n" not in str(err.value) and "version 9 does not exist (its newest is 2)" in str(err.value)
    with pytest.raises(PrepError, match="--extend works with --table"):
        materialize_mixture(mixture=pinned, output=out, extend=True, **run)


@pytest.mark.s3
def test_extend_on_s3(s3_bucket, tmp_path):
    table, out = f"s3://{s3_bucket}/t.lance", f"s3://{s3_bucket}/out"
    opts = storage.lance_storage_options(table)
    local = tiny_prepared(str(tmp_path / "t.lance"), num_rows=200)
    lance.write_dataset(lance.dataset(local).to_table(), table, storage_options=opts)
    first = materialize_shuffle(table=table, output=out, epochs=1, **RUN)
    grow(table, tmp_path, 40, seed=7, storage_options=opts)
    m = materialize_shuffle(table=table, output=out, epochs=2, extend=True, **RUN)
    assert [e.version for e in m.epochs] == [1, 2] and m.epochs[0] == first.epochs[0]
    assert set(epoch_ids(out, 1)) == set(table_ids(table, storage_options=opts))
    report = verify(out)
    assert report.ok, report.problems


@pytest.mark.slow
def test_extend_under_the_ray_executor_writes_what_the_local_one_does(ray_local, tmp_path):
    table = tiny_prepared(str(tmp_path / "t.lance"), num_rows=300)
    outs = {ex: str(tmp_path / ex) for ex in ("ray", "local")}
    for ex, out in outs.items():
        materialize_shuffle(table=table, output=out, epochs=1, **{**RUN, "executor": ex})
    grow(table, tmp_path, 60, seed=7)
    got = {ex: materialize_shuffle(table=table, output=out, epochs=2, extend=True, **{**RUN, "executor": ex})
           for ex, out in outs.items()}
    assert [e.version for e in got["ray"].epochs] == [1, 2]
    assert [[s.checksum for s in e.splits] for e in got["ray"].epochs] == \
        [[s.checksum for s in e.splits] for e in got["local"].epochs]
    report = verify(outs["ray"])
    assert report.ok, report.problems


def test_extend_refuses_a_version_whose_rows_differ_in_shape(grown, tmp_path):
    table, out, _, before = grown
    t = lance.dataset(table).to_table()
    lance.write_dataset(t.drop_columns(["length"]), table, mode="overwrite")  # version 3: a column less
    with pytest.raises(PrepError, match=r"--extend: version 3 of .* columns \['id', 'input_ids', 'loss_mask', 'length'\] "
                                        r"-> \['id', 'input_ids', 'loss_mask'\]"):
        materialize_shuffle(table=table, output=out, epochs=3, extend=True, **RUN)
    assert files(out, range(2)) == before and not (Path(out) / "epoch-00002").exists()


@pytest.mark.slow  # a child process killed at a commit point: ~10 s here
def test_an_extension_killed_midway_is_finished_by_the_same_command(grown, tmp_path):
    table, out, _, before = grown
    reference = str(tmp_path / "reference")
    shutil.copytree(out, reference)
    want = materialize_shuffle(table=table, output=reference, epochs=4, extend=True, **RUN)
    env = {**os.environ, "PYTHONPATH": str(REPO), KILL_ENV: "done:3"}  # mid-epoch 2: the first epoch over version 2
    killed = subprocess.run([sys.executable, "-m", "prep", "materialize-shuffle", "--table", table, "--output", out,
                             "--epochs", "4", "--extend", "--splits", "4", "--seed", "5", "--executor", "local",
                             "--num-cpus", "1"], env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == KILLED_EXIT, killed.stderr[-2000:]
    assert read_manifest(out).epochs[-1].epoch == 1  # the manifest still holds the old epochs only
    got = materialize_shuffle(table=table, output=out, epochs=4, extend=True, **RUN)
    assert got.epochs == want.epochs and got.fingerprint == want.fingerprint
    assert files(out, range(2)) == before and verify(out).ok


def test_a_reader_cache_filled_before_the_extension_serves_the_extended_output(grown, tmp_path):
    table, out, _, _ = grown
    cache = str(tmp_path / "cache")
    before = _ids(ReaderDataset(out, global_batch_size=8, cache_dir=cache))
    materialize_shuffle(table=table, output=out, epochs=3, extend=True, **RUN)
    after = ReaderDataset(out, global_batch_size=8, cache_dir=cache)  # the same materialization: the cache is kept
    got = _ids(after)
    assert len(got) == sum(after.steps_per_epoch.values()) > len(before)
    assert all(np.array_equal(a, b) for a, b in zip(before, got))
    assert sorted(p.name for p in Path(cache).glob("epoch-*")) == ["epoch-00000", "epoch-00001", "epoch-00002"]
