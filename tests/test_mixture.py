"""Mixtures end to end: materialize several real tables by weight, read them back, verify them.

Tables: real GSM8K SFT rows (mistral-v3), a second SFT table made here from other GSM8K
rows, a tiny one (upsampled), and for the refusals a packed table and a table with
another tokenizer. Every check reads what was written: the reader's batches, the split
datasets, ``prep verify``'s report.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
from dataclasses import replace

import lance
import numpy as np
import pyarrow as pa
import pytest

import reader_fixtures as rf
from tables import kill_midway
from prep.io.checksum import dataset_checksum
from prep.cli import main
from prep.errors import PrepError
from prep.io.materialized import read_manifest, write_manifest
from prep.materialize import materialize_mixture
from prep.materialize.mixture.file import load_mixture
from prep.plan.mixture import batch_counts
from prep.plan.spec import MixtureSource, MixtureSpec, PlanSpec
from prep.reader import ReaderDataset
from prep.materialize.verify import verify

S, G = 4, 16


@pytest.fixture(scope="module")
def tables(tmp_path_factory, shared_data) -> dict[str, str]:
    """gsm8k (300 rows), other (100 other GSM8K rows, fresh ids), tiny (6 rows), packed, foreign (another tokenizer)."""
    root = tmp_path_factory.mktemp("mixture-tables")
    rows = rf.gsm8k_sft(400)
    meta = rf.sft_metadata(300, 0)
    made = {"gsm8k": rows.slice(0, 300), "other": rows.slice(300, 100), "tiny": rows.slice(0, 6)}
    out = {}
    for salt, (name, table) in enumerate(made.items()):
        table = table.set_column(0, "id", pa.array(rf.row_ids(table.num_rows, salt=salt + 1)))
        out[name] = str(root / f"{name}.lance")
        rf.write_table(out[name], table, meta)
    packed, packed_meta = rf.packed_table(64, 32, 0)
    out["packed"] = str(root / "packed.lance")
    rf.write_table(out["packed"], packed.drop_columns(["position_ids"]).slice(0, 64), packed_meta)
    foreign = {**meta, "tokenizer": {**meta["tokenizer"], "hash": "another-tokenizer"}}
    out["foreign"] = str(root / "foreign.lance")
    rf.write_table(out["foreign"], made["other"], foreign)
    return out


def mixture(tables: dict[str, str], weights: dict[str, float], *, by: str = "rows", epoch_rows: int | None = 320,
            **source_keys) -> PlanSpec:
    return PlanSpec(num_splits=S, seed=5, mixture=MixtureSpec(
        sources=tuple(MixtureSource(table=tables[n], weight=w, **source_keys.get(n, {})) for n, w in weights.items()),
        weight_by=by, global_batch=G, epoch_rows=epoch_rows))


def global_batches(out: str, world_size: int, gbs: int = G, epochs=None) -> list[tuple[np.ndarray, np.ndarray]]:
    """(ids, per-source rows) of every global batch, the ranks' local batches put together."""
    per_rank = [list(ReaderDataset(out, global_batch_size=gbs, rank=r, world_size=world_size, epochs=epochs))
                for r in range(world_size)]
    return [(np.concatenate([b.ids for b in step]), np.sum([b.source_rows for b in step], axis=0))
            for step in zip(*per_rank)]


# ---------------------------------------------------------------- proportions


@pytest.mark.parametrize("weights", [
    {"gsm8k": 3, "other": 1},
    {"gsm8k": 1, "other": 1, "tiny": 0.02},  # a source far below one row a batch
    {"gsm8k": 1, "tiny": 1},                  # the tiny source repeats ~27 times an epoch, a fresh order each pass
], ids=["3-1", "tiny-weight", "upsampled"])
def test_every_global_batch_holds_each_source_within_one_row_of_its_share(tables, tmp_path, weights):
    out = str(tmp_path / "out")
    manifest = materialize_mixture(mixture=mixture(tables, weights), output=out, epochs=2, executor="local")
    share = np.array(list(weights.values())) / sum(weights.values()) * G
    batches = global_batches(out, 1)
    assert len(batches) == 2 * 320 // G
    counts = np.stack([c for _, c in batches])
    assert (counts >= np.floor(share)).all() and (counts <= np.ceil(share)).all()
    assert (np.abs(np.cumsum(counts, axis=0) - np.outer(np.arange(1, len(counts) + 1), share)) < 1).all()
    assert [list(e.source_rows) for e in manifest.epochs] == [counts[i * 20:(i + 1) * 20].sum(axis=0).tolist() for i in (0, 1)]
    report = verify(out)
    assert report.ok, report.problems
    assert report.rows == 2 * 320 and "weights" in report.notes[-1]
    if "tiny" in weights and weights["tiny"] == 1:  # upsampled: every pass over its 6 rows is a fresh order of all 6
        tiny_ids = set(lance.dataset(tables["tiny"]).to_table().column("id").to_pylist())
        seen = [i for ids, _ in batches for i in ids.tolist() if i in tiny_ids]
        assert all(set(seen[k:k + 6]) == tiny_ids for k in range(0, len(seen) - 5, 6))
        assert len({tuple(seen[k:k + 6]) for k in range(0, 60, 6)}) > 1


def test_by_tokens_each_sources_tokens_stay_within_a_few_rows_of_its_share_at_every_global_batch(tables, tmp_path):
    weights = {"gsm8k": 2, "other": 1, "tiny": 0.5}
    out = str(tmp_path / "out")
    materialize_mixture(mixture=mixture(tables, weights, by="tokens"), output=out, epochs=1, executor="local")
    ds = ReaderDataset(out, global_batch_size=G, rank=0, world_size=1)
    tokens = np.cumsum([b.source_tokens for b in ds], axis=0)  # consumed per source, at each global batch's end
    assert tuple(tokens[-1]) == ds.stats().source_tokens == read_manifest(out).epoch(0).source_tokens  # reader == writer
    share = np.array(list(weights.values())) / sum(weights.values())
    longest = max(int(np.max(lance.dataset(tables[n]).to_table(columns=["length"]).column("length"))) for n in weights)
    # the bound prep.plan.mixture's tests check on every prefix: (1 + sources) / 2 of the longest row
    assert np.abs(tokens - np.outer(tokens.sum(axis=1), share)).max() <= longest * (1 + len(weights)) / 2
    assert "sources rows" in ds.status_line()
    assert verify(out).ok


def test_an_epoch_size_in_tokens_becomes_whole_global_batches_of_about_that_many_tokens(tables, tmp_path):
    base = mixture(tables, {"gsm8k": 1, "other": 1}, epoch_rows=None)
    plan = replace(base, mixture=replace(base.mixture, epoch_tokens=40_000))
    manifest = materialize_mixture(mixture=plan, output=str(tmp_path / "out"), epochs=1, executor="local")
    rows, tokens = manifest.plan.mixture.epoch_rows, sum(manifest.epochs[0].source_tokens)
    assert rows % G == 0 and sum(manifest.epochs[0].source_rows) == rows
    assert abs(tokens - 40_000) < 0.1 * 40_000  # the mean row of this mixture, times whole global batches


# ---------------------------------------------------------------- elasticity, resume, rerun


def test_every_world_size_dividing_the_splits_reads_the_same_global_batches_and_a_multiple_of_g_keeps_them(tables, tmp_path):
    out = str(tmp_path / "out")
    materialize_mixture(mixture=mixture(tables, {"gsm8k": 3, "other": 1}), output=out, epochs=1, executor="local")
    one = global_batches(out, 1)
    for world in (2, 4):
        assert all(np.array_equal(a[0], b[0]) for a, b in zip(one, global_batches(out, world), strict=True))
    doubled = global_batches(out, 2, gbs=2 * G)  # each reader batch is two whole mixture batches: same rows, same counts
    assert [sorted(ids.tolist()) for ids, _ in doubled] == [sorted(np.concatenate([one[2 * t][0], one[2 * t + 1][0]]).tolist())
                                                           for t in range(len(one) // 2)]
    assert all((c == one[2 * t][1] + one[2 * t + 1][1]).all() for t, (_, c) in enumerate(doubled))
    with pytest.raises(PrepError, match=rf"global_batch_size=24 is not a multiple of the mixture's global batch {G}"):
        ReaderDataset(out, global_batch_size=24, rank=0, world_size=1)


def test_a_global_batch_that_the_default_48_splits_do_not_divide_reads_the_same_exact_batches_at_every_world_size(
        tables, tmp_path):
    """G = 64 over 48 splits (issue 33): each reader global batch is one mixture batch, with exactly the plan's
    per-batch counts, at world sizes 1, 4 and 8; a reader batch of 2G or 3G (whose gcd with 48 differs) is whole
    mixture batches; an epoch that is not a multiple of lcm(64, 48) = 192 is refused saying what to use."""
    weights = {"gsm8k": 3, "other": 1}
    mix = tmp_path / "mix.yaml"  # no --splits: the default 48
    mix.write_text(f"weight_by: rows\nglobal_batch: 64\nsources:\n  - {{table: {tables['gsm8k']}, weight: 3}}\n"
                   f"  - {{table: {tables['other']}, weight: 1}}\n")
    out = str(tmp_path / "out")
    manifest = materialize_mixture(mixture=mix, output=out, epochs=2, executor="local")
    assert manifest.plan.num_splits == 48 and manifest.plan.mixture.epoch_rows == 384  # 400 rows, down to 2 x 192
    assert {s.num_rows for e in manifest.epochs for s in e.splits} == {8}  # every split the same rows: none dropped
    one = global_batches(out, 1, gbs=64)
    expected = batch_counts(list(weights.values()), 64, 0, 12)  # 6 batches an epoch, counted on from epoch 0
    assert len(one) == 12 and np.array_equal(np.stack([c for _, c in one]), expected)
    assert all(len(set(ids.tolist())) == 64 for ids, _ in one[:6])  # epoch 0: no stream passes its end
    for world in (4, 8):
        assert all(np.array_equal(a[0], b[0]) for a, b in zip(one, global_batches(out, world, gbs=64), strict=True))
    for k in (2, 3):
        wide = global_batches(out, 2, gbs=64 * k, epochs=[0])
        assert [sorted(ids.tolist()) for ids, _ in wide] == [
            sorted(np.concatenate([one[k * t + i][0] for i in range(k)]).tolist()) for t in range(6 // k)]
    assert verify(out).ok
    bad = tmp_path / "bad.yaml"
    bad.write_text(mix.read_text() + "epoch_rows: 320\n")
    with pytest.raises(PrepError, match=r"epoch_rows=320 must be a multiple of 192, the least common multiple of "
                                        r"global_batch=64 and num_splits=48 .* use 192 or 384, or leave epoch_rows out"):
        materialize_mixture(mixture=bad, output=str(tmp_path / "bad"), epochs=1, executor="local")


def test_resuming_mid_epoch_reads_what_the_uninterrupted_run_reads(tables, tmp_path):
    out = str(tmp_path / "out")
    materialize_mixture(mixture=mixture(tables, {"gsm8k": 1, "other": 1, "tiny": 0.02}), output=out, epochs=2, executor="local")
    whole = [b.ids for b in ReaderDataset(out, global_batch_size=G, rank=0, world_size=1)]
    first = ReaderDataset(out, global_batch_size=G, rank=0, world_size=1)
    head = []
    for b in first:
        head.append(b.ids)
        if len(head) == 27:  # mid epoch 1
            break
    state = first.state_dict()
    again = ReaderDataset(out, global_batch_size=G, rank=0, world_size=1)
    again.load_state_dict(state)
    rest = [b.ids for b in again]
    assert len(head) + len(rest) == len(whole)
    assert all(np.array_equal(a, b) for a, b in zip(head + rest, whole))


def test_a_run_killed_midway_then_rerun_writes_what_an_uninterrupted_run_writes_and_so_does_ray(tables, tmp_path, ray_local):
    mix = tmp_path / "mix.yaml"
    mix.write_text(f"weight_by: rows\nglobal_batch: 16\nsources:\n  - {{table: {tables['gsm8k']}, weight: 3}}\n"
                   f"  - {{table: {tables['other']}, weight: 1}}\n")
    out = tmp_path / "killed"
    args = ["materialize-shuffle", "--mixture", str(mix), "--output", str(out), "--epochs", "3", "--splits", "16",
            "--read-rows", "4", "--num-cpus", "1"]
    kill_midway(args, out, env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, records=3)
    done = glob.glob(f"{out}/epoch-*/*.done.json")
    assert 3 <= len(done) < 48, "not killed mid-run"
    assert not (out / "manifest.json").exists()
    survivors = {p: os.stat(p).st_mtime_ns for p in done}
    resumed = materialize_mixture(mixture=mix, output=str(out), epochs=3, splits=16, executor="local")
    assert {p: os.stat(p).st_mtime_ns for p in survivors} == survivors  # finished, not redone
    clean = materialize_mixture(mixture=mix, output=str(tmp_path / "clean"), epochs=3, splits=16, executor="local")
    assert resumed.to_json() == clean.to_json()
    on_ray = materialize_mixture(mixture=mix, output=str(tmp_path / "ray"), epochs=3, splits=16, executor="ray")
    assert [e.splits for e in on_ray.epochs] == [e.splits for e in clean.epochs]
    assert [e.source_tokens for e in on_ray.epochs] == [e.source_tokens for e in clean.epochs]


def test_taking_rows_from_the_tables_writes_what_holding_them_writes(tables, tmp_path):
    plan = mixture(tables, {"gsm8k": 3, "other": 1}, gsm8k={"filter": "length <= 200"})
    held = materialize_mixture(mixture=plan, output=str(tmp_path / "held"), epochs=1, executor="local")
    taken = materialize_mixture(mixture=plan, output=str(tmp_path / "taken"), epochs=1, executor="local", read_rows=7,
                                max_memory="1MiB")  # too big to hold: each split takes from the tables
    assert [e.splits for e in taken.epochs] == [e.splits for e in held.epochs]
    assert taken.mixture[0].selected_rows < taken.mixture[0].num_rows
    assert verify(str(tmp_path / "taken")).ok


# ---------------------------------------------------------------- verify catches tampering


def _swap(out: str, epoch: int, split: int, a: int, b: int) -> None:
    """Swaps rows ``a`` and ``b`` of a split dataset and re-signs the manifest, so only the plan can tell."""
    uri = os.path.join(out, f"epoch-{epoch:05d}/split-{split:05d}.lance")
    table = lance.dataset(uri).to_table()
    order = np.arange(table.num_rows)
    order[[a, b]] = order[[b, a]]
    shutil.rmtree(uri)
    lance.write_dataset(table.take(pa.array(order)), uri, data_storage_version="2.0")
    manifest = read_manifest(out)
    rows, checksum = dataset_checksum(uri, None)
    e = manifest.epoch(epoch)
    splits = tuple(replace(s, checksum=checksum) if s.split == split else s for s in e.splits)
    write_manifest(out, replace(manifest, epochs=tuple(replace(x, splits=splits) if x.epoch == epoch else x
                                                         for x in manifest.epochs)))


def test_verify_catches_a_row_swapped_between_sources_across_global_batches(tables, tmp_path):
    out = str(tmp_path / "out")
    materialize_mixture(mixture=mixture(tables, {"gsm8k": 3, "other": 1}), output=out, epochs=1, executor="local")
    source = lance.dataset(os.path.join(out, "epoch-00000/split-00002.lance")).to_table().column("source").to_numpy()
    a = int(np.flatnonzero(source == 0)[0])
    b = int(np.flatnonzero(source == 1)[-1])  # another global batch (b = G/S = 4 rows of each)
    assert a // (G // S) != b // (G // S)
    _swap(out, 0, 2, a, b)
    report = verify(out)
    assert not report.ok
    text = " | ".join(report.problems)
    assert f"epoch 0 split 2: row {min(a, b)} is from source" in text
    assert "global batch" in text and "rows per source" in text


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize("other,says", [
    ("foreign", "were tokenized with different tokenizers"),
    ("packed", "packed and unpacked tables cannot be mixed"),
])
def test_tables_that_cannot_share_an_output_are_refused_naming_both(tables, tmp_path, other, says):
    with pytest.raises(PrepError) as err:
        materialize_mixture(mixture=mixture(tables, {"gsm8k": 1, other: 1}), output=str(tmp_path / "o"), epochs=1)
    msg = str(err.value)
    assert says in msg and tables["gsm8k"] in msg and tables[other] in msg and "\n" not in msg
    assert not os.path.exists(tmp_path / "o" / "manifest.json")


def test_an_on_the_fly_plan_refuses_a_mixture(tables):
    with pytest.raises(PrepError, match="a mixture is read from its materialized output"):
        ReaderDataset(tables["gsm8k"], global_batch_size=G, rank=0, world_size=1, plan=mixture(tables, {"gsm8k": 1}))


def test_a_source_asked_to_repeat_more_than_its_max_repeats_is_refused(tables, tmp_path):
    plan = mixture(tables, {"gsm8k": 1, "tiny": 1}, tiny={"max_repeats": 3})  # 160 rows of 6 an epoch
    with pytest.raises(PrepError, match=r"epoch 0 takes 160 rows of its 6 \(26.67 passes\), more than its max_repeats 3"):
        materialize_mixture(mixture=plan, output=str(tmp_path / "o"), epochs=1, executor="local")


def test_repeats_are_stated_per_source_in_the_summary_the_manifest_and_inspect(tables, tmp_path, capsys):
    """Issue 33: an epoch that goes through a small table many times says so, per source: rows available,
    the most an epoch drew, repeats; the manifest field is strict, round-trips, and older manifests still read."""
    mix = tmp_path / "mix.yaml"
    mix.write_text(f"weight_by: rows\nglobal_batch: {G}\nepoch_rows: 320\nsources:\n"
                   f"  - {{table: {tables['gsm8k']}, weight: 1}}\n  - {{table: {tables['tiny']}, weight: 1}}\n")
    out = str(tmp_path / "out")
    assert main(["materialize-shuffle", "--mixture", str(mix), "--output", out, "--epochs", "2", "--splits", str(S)]) == 0
    printed = capsys.readouterr().out
    assert "300 rows available, 160 drawn an epoch, repeats 0.53x (no row repeats within an epoch)" in printed
    assert "6 rows available, 160 drawn an epoch, repeats 26.67x (rows repeat within an epoch)" in printed
    manifest = read_manifest(out)
    assert [(t.selected_rows, t.drawn_rows, t.repeats) for t in manifest.mixture] == [(300, 160, 0.5333), (6, 160, 26.6667)]
    doc = json.load(open(os.path.join(out, "manifest.json")))
    assert [(t["drawn_rows"], t["repeats"]) for t in doc["mixture"]["tables"]] == [(160, 0.5333), (160, 26.6667)]
    assert type(manifest).from_json(manifest.to_json(), out) == manifest
    older = json.loads(json.dumps(doc))  # written before the field: counted from the epochs
    for t in older["mixture"]["tables"]:
        del t["drawn_rows"], t["repeats"]
    assert type(manifest).from_json(older, out) == manifest
    for key, value, says in [("repeats", 2.0, "repeats=2.0 must be"), ("drawn_rows", "160", "drawn_rows='160'"),
                             ("drawn_rows", 150, "drawn_rows=150 and repeats=26.6667 must be")]:
        bad = json.loads(json.dumps(doc))
        bad["mixture"]["tables"][1][key] = value
        with pytest.raises(PrepError, match=re.escape(says)):
            type(manifest).from_json(bad, out)
    bad = json.loads(json.dumps(doc))
    bad["mixture"]["tables"][1].update(drawn_rows=12, repeats=2.0)
    with pytest.raises(PrepError, match="drawn_rows=12 but its epochs drew at most 160 rows from it"):
        type(manifest).from_json(bad, out)
    assert main(["inspect", out]) == 0
    text = capsys.readouterr().out
    assert "mixture of 2 sft tables, 320 rows an epoch:" in text
    assert f"source 0: {tables['gsm8k']} version 1: 300 rows available, 160 drawn an epoch, repeats 0.53x" in text
    assert f"source 1: {tables['tiny']} version 1: 6 rows available, 160 drawn an epoch, repeats 26.67x" in text
    assert main(["inspect", out, "--json"]) == 0
    assert [t["repeats"] for t in json.loads(capsys.readouterr().out)["mixture"]] == [0.5333, 26.6667]


def test_the_mixture_file_is_strict_and_the_cli_materializes_it(tables, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"weight_by: rows\nglobal_batch: {G}\nsources:\n  - {{table: {tables['gsm8k']}, weight: 1, wieght: 2}}\n")
    with pytest.raises(PrepError, match=r"bad.yaml: key 'sources.0.wieght': Extra inputs are not permitted"):
        load_mixture(bad, S)
    bad.write_text(f"weight_by: rows\nglobal_batch: '{G}'\nsources:\n  - {{table: {tables['gsm8k']}, weight: 1}}\n")
    with pytest.raises(PrepError, match=rf"bad.yaml: plan.mixture.global_batch='{G}' must be an integer >= 1 \(read as the string"):
        load_mixture(bad, S)
    good = tmp_path / "mix.yaml"  # the five lines of docs/materialize.md
    good.write_text(f"weight_by: rows\nglobal_batch: {G}\nsources:\n  - {{table: {tables['gsm8k']}, weight: 3, filter: 'length <= 256'}}\n"
                    f"  - {{table: {tables['other']}, weight: 1}}\n")
    out = str(tmp_path / "out")
    assert main(["materialize-shuffle", "--mixture", str(good), "--output", out, "--epochs", "3", "--splits", str(S)]) == 0
    printed = capsys.readouterr().out
    assert "rows 0.750" in printed and "weight 0.750" in printed
    manifest = read_manifest(out)
    doc = json.load(open(os.path.join(out, "manifest.json")))
    assert [t["uri"] for t in doc["mixture"]["tables"]] == [tables["gsm8k"], tables["other"]]
    assert len(manifest.epochs) == 3 and all(e.source_rows[0] == 3 * e.source_rows[1] for e in manifest.epochs)
    assert main(["verify", out]) == 0
    assert "rows 0.750/0.250" in capsys.readouterr().out
    assert main(["materialize-shuffle", "--mixture", str(good), "--output", out, "--epochs", "1", "--seed", "3"]) != 0
    assert "--seed: with --mixture" in capsys.readouterr().err
