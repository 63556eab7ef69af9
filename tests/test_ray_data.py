"""prep inside Ray Data pipelines (prep.integrations.ray_data), on the session's local Ray.

Real pieces throughout: GSM8K rows, the Mistral tokenizer, hymenoptera photos, Lance tables,
and prep's own commands on what write_table commits.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import GSM8K, HYMENOPTERA, REPO
from prep.cli import main as cli_main
from prep.errors import PrepError, TooManyRejects
from prep.io import lance_tables
from prep.prepare import faults

pytestmark = pytest.mark.usefixtures("ray_local")

ROWS = 40


def gsm_rows(n: int = ROWS, first: int = 0) -> list[dict]:
    with open(GSM8K) as f:
        return [json.loads(line) for line in f.readlines()[first:first + n]]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def items(rows: list[dict]):
    """``ray.data.from_items`` in two blocks: its default, a block per row, makes each 40-row pipeline
    run 40 Tokenize calls and 40 one-row fragment writes (and start write workers for them): ~10 s a
    pipeline on this machine for nothing the tests check; two blocks still make two fragments."""
    import ray

    return ray.data.from_items(rows, override_num_blocks=2)


def tokenize(ds, tokenizer_dir: str, **keys):
    from prep.integrations.ray_data import Tokenize

    return ds.map_batches(Tokenize, fn_constructor_kwargs=dict(tokenizer=tokenizer_dir, format="sft", **keys),
                          concurrency=1, num_cpus=0.5, batch_format="pyarrow")


def token_rows(uri: str) -> Counter:
    t = lance.dataset(uri).to_table(columns=["input_ids", "loss_mask"])
    return Counter(zip(map(tuple, t.column("input_ids").to_pylist()), map(tuple, t.column("loss_mask").to_pylist())))


def rejects_of(uri: str) -> list[dict]:
    return sorted(lance.dataset(uri).to_table().to_pylist(), key=lambda r: (r["source"], r["position"]))


SNIPPET = """
import ray
from prep.integrations.ray_data import Tokenize, DecodeImages, write_table, read_table

ds = ray.data.read_parquet(LAKE)                         # any Ray Data source, any of their own steps
ds = ds.map_batches(Tokenize, fn_constructor_kwargs=dict(tokenizer=TOKENIZER, format="sft"),
                    concurrency=8, batch_format="pyarrow")
summary = write_table(ds, OUT)                           # a prep table + its rejects table, counts reconciled
table = read_table(OUT)                                  # a ray.data.Dataset of the committed table
"""


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lake")
    pq.write_table(pa.Table.from_pylist(gsm_rows()), folder / "part-0.parquet")
    return folder


@pytest.mark.slow
def test_the_issues_snippet_runs_as_written_on_a_local_ray(lake, tokenizer_dir, tmp_path):
    """In a process of its own: ``concurrency=8`` needs a Ray with more than 8 CPUs (logical ones: ``ray.init(num_cpus=10)``):
    on the session's 2-CPU Ray a pool of 8 one-CPU actors never fills, and with exactly 8 the actors leave no CPU to the
    reads and writes; either way Ray Data waits forever (ray issue 44687)."""
    out = str(tmp_path / "chat.lance")
    temp = tempfile.mkdtemp(prefix="prep-rd-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    script = (f"import ray\nray.init(num_cpus=10, include_dashboard=False, _temp_dir={temp!r})\n"
              f"LAKE, TOKENIZER, OUT = {str(lake)!r}, {tokenizer_dir!r}, {out!r}\n" + SNIPPET
              + "assert table.count() == summary['rows_written'] == 40, summary\n")
    proc = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=600, start_new_session=True)
    shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert lance.dataset(out).count_rows() == ROWS


@pytest.fixture(scope="module")
def snippet_table(lake, tmp_path_factory, tokenizer_dir) -> str:
    """The snippet on the session's Ray (2 CPUs: one Tokenize actor of half a CPU)."""
    import ray
    from prep.integrations.ray_data import Tokenize, read_table, write_table

    out = str(tmp_path_factory.mktemp("prep") / "chat.lance")
    ds = ray.data.read_parquet(str(lake))
    ds = ds.map_batches(Tokenize, fn_constructor_kwargs=dict(tokenizer=tokenizer_dir, format="sft"),
                        concurrency=1, num_cpus=0.5, batch_format="pyarrow")
    summary = write_table(ds, out)
    assert summary["rows_read"] == ROWS == summary["rows_written"] + summary["rows_rejected"]
    assert read_table(out).count() == ROWS
    return out


def test_the_snippet_makes_a_table_every_prep_command_takes(snippet_table, tmp_path):
    from prep.reader import ReaderDataset

    assert cli_main(["inspect", snippet_table]) == 0
    epochs = str(tmp_path / "epochs")
    assert cli_main(["materialize-shuffle", "--table", snippet_table, "--output", epochs, "--epochs", "1", "--splits", "2",
                     "--executor", "local"]) == 0
    assert cli_main(["verify", epochs]) == 0
    ids = set(lance.dataset(snippet_table).to_table(columns=["id"]).column("id").to_pylist())
    read = [i for batch in ReaderDataset(epochs, global_batch_size=4, rank=0, world_size=1) for i in batch.ids.tolist()]
    assert len(read) == ROWS // 4 * 4 and len(set(read)) == len(read) and set(read) <= ids


def test_a_pipeline_with_a_user_filter_equals_prep_pretokenize_of_the_same_rows(ray_local, tokenizer_dir, tmp_path):
    import prep
    from prep.integrations.ray_data import write_table

    rows = gsm_rows()
    keep = [r for r in rows if len(r["question"]) % 3]  # the user's filter
    ds = items(rows).filter(lambda r: len(r["question"]) % 3 != 0)
    summary = write_table(tokenize(ds, tokenizer_dir), str(tmp_path / "ray.lance"))
    prep.pretokenize(input=str(write_jsonl(tmp_path / "kept.jsonl", keep)), output=str(tmp_path / "prep.lance"),
                     tokenizer=tokenizer_dir, format="sft", executor="local")

    assert 0 < len(keep) < ROWS and summary["rows_read"] == summary["rows_written"] == len(keep)
    assert token_rows(str(tmp_path / "ray.lance")) == token_rows(str(tmp_path / "prep.lance"))


def test_five_bad_rows_become_five_rejects_with_reasons_and_the_counts_reconcile(ray_local, tokenizer_dir, tmp_path):
    from prep.integrations.ray_data import write_table

    rows = gsm_rows()
    bad = [{"question": f"bad {i}", "answer": None, "n": i} for i in range(5)]
    ds = items([{**r, "n": 100 + i} for i, r in enumerate(rows)] + bad)
    out = str(tmp_path / "t.lance")
    summary = write_table(tokenize(ds, tokenizer_dir, id_column="n"), out, max_reject_fraction=0.2)

    assert (summary["rows_read"], summary["rows_written"], summary["rows_rejected"]) == (ROWS + 5, ROWS, 5)
    found = rejects_of(summary["rejects"])
    assert [r["position"] for r in found] == [f"n {i}" for i in range(5)]
    assert all(r["source"] == "ray.data" and r["reason"] and "bad" in r["raw"] for r in found)
    meta = json.loads(lance.dataset(out).schema.metadata[b"prep"])
    assert meta["counts"]["rows_read"] == ROWS + 5 and meta["counts"]["rows_rejected"] == 5


@pytest.mark.slow
def test_over_the_reject_budget_the_rejects_commit_and_the_table_does_not(ray_local, tokenizer_dir, tmp_path):
    from prep.integrations.ray_data import write_table

    ds = items(gsm_rows(10) + [{"question": "q", "answer": None}] * 5)
    out = tmp_path / "t.lance"
    with pytest.raises(TooManyRejects, match="5 of 15 rows rejected"):
        write_table(tokenize(ds, tokenizer_dir), str(out))
    assert not lance_tables.table_exists(str(out)) and lance.dataset(str(tmp_path / "t.rejects.lance")).count_rows() == 5


def test_keywords_write_table_owns_are_refused_in_tokenize(tokenizer_dir):
    from prep.integrations.ray_data import Tokenize

    with pytest.raises(PrepError, match="output= is not a Tokenize keyword"):
        Tokenize(tokenizer=tokenizer_dir, format="sft", output="x.lance")
    with pytest.raises(PrepError, match="pack= is not available"):
        Tokenize(tokenizer=tokenizer_dir, format="pretrain", pack={"seq_len": 64})


@pytest.mark.slow
def test_a_crashing_image_is_one_reject_and_the_pipeline_ends(ray_local, tmp_path):
    from prep.integrations.ray_data import DecodeImages, write_table

    folder = tmp_path / "imgs"
    folder.mkdir()
    for p in sorted((HYMENOPTERA / "ants").iterdir())[:5]:
        shutil.copy(p, folder / p.name)
    shutil.copy(next(iter(sorted((HYMENOPTERA / "bees").iterdir()))), folder / "poison.jpg")
    ds = ray_local.data.read_binary_files(str(folder), include_paths=True, override_num_blocks=2)  # two batches of three
    ds = ds.map_batches(DecodeImages, fn_constructor_kwargs=dict(size=32), concurrency=1, num_cpus=0.5, batch_format="pyarrow",
                        runtime_env={"env_vars": {"PREP_TEST_FAULTS": "segv:poison"}})
    summary = write_table(ds, str(tmp_path / "img.lance"), max_reject_fraction=0.5)

    assert (summary["rows_read"], summary["rows_written"], summary["rows_rejected"]) == (6, 5, 1)
    (reject,) = rejects_of(summary["rejects"])
    assert reject["source"].endswith("poison.jpg") and "signal 11" in reject["reason"]
    table = lance.dataset(str(tmp_path / "img.lance"))
    assert table.schema.field("image").type == pa.list_(pa.uint8(), 32 * 32 * 3)
    assert json.loads(table.schema.metadata[b"prep"])["image"]["shape"] == [32, 32, 3]


@pytest.mark.slow
def test_tokenize_isolated_turns_a_row_that_crashes_the_worker_into_one_reject(ray_local, tokenizer_dir, tmp_path):
    from prep.integrations.ray_data import Tokenize, write_table

    rows = gsm_rows(10)
    ds = items(rows).map_batches(
        Tokenize, fn_constructor_kwargs=dict(tokenizer=tokenizer_dir, format="sft", isolate=True), concurrency=1, num_cpus=0.5,
        batch_format="pyarrow", runtime_env={"env_vars": {"PREP_TEST_FAULTS": "segv:" + rows[3]["question"][:30]}})
    summary = write_table(ds, str(tmp_path / "t.lance"), max_reject_fraction=0.2)

    assert (summary["rows_read"], summary["rows_written"], summary["rows_rejected"]) == (10, 9, 1)
    (reject,) = rejects_of(summary["rejects"])
    assert "signal 11" in reject["reason"] and rows[3]["question"][:30] in reject["raw"]


_KILLED = """
import os, sys, ray
from prep.integrations.ray_data import Tokenize
from prep.integrations.ray_data import write_table
ray.init(address=sys.argv[1])
ds = ray.data.read_json(sys.argv[2]).map_batches(Tokenize, fn_constructor_kwargs=dict(tokenizer=sys.argv[3], format="sft"),
                                                 concurrency=1, num_cpus=0.5, batch_format="pyarrow")
write_table(ds, sys.argv[4], max_reject_fraction=0.5)
"""


@pytest.mark.slow
@pytest.mark.parametrize("point", ["claimed", "rejects"])
def test_write_table_killed_before_its_commit_leaves_no_table_and_the_rerun_works(point, ray_local, tokenizer_dir, tmp_path):
    from prep.integrations.ray_data import read_table, write_table

    src = write_jsonl(tmp_path / "in.jsonl", gsm_rows() + [{"question": "q", "answer": None}])
    out = str(tmp_path / "t.lance")
    env = {**os.environ, "PYTHONPATH": str(REPO), faults.ENV: f"commit:kill:{point}"}
    args = [sys.executable, "-c", _KILLED, ray_local.get_runtime_context().gcs_address, str(src), tokenizer_dir, out]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert not lance_tables.table_exists(out)
    with pytest.raises(PrepError, match="no Lance table"):
        read_table(out)

    summary = write_table(tokenize(ray_local.data.read_json(str(src)), tokenizer_dir), out, max_reject_fraction=0.5)
    assert (summary["rows_written"], summary["rows_rejected"]) == (ROWS, 1)
    assert lance.dataset(out).count_rows() == ROWS and len(rejects_of(summary["rejects"])) == 1


@pytest.mark.slow
def test_append_is_a_growth_step_and_another_config_is_refused(ray_local, tokenizer_dir, tmp_path):
    from prep.integrations.ray_data import write_table

    out = str(tmp_path / "t.lance")
    first, second = gsm_rows(20), gsm_rows(20, first=20)
    write_table(tokenize(items(first), tokenizer_dir), out)
    summary = write_table(tokenize(items(second), tokenizer_dir), out, mode="append")
    whole = str(tmp_path / "whole.lance")
    write_table(tokenize(items(first + second), tokenizer_dir), whole)

    assert token_rows(out) == token_rows(whole) and summary["step"]["version"] == 2
    meta = json.loads(lance.dataset(out).schema.metadata[b"prep"])
    assert [h["version"] for h in meta["history"]] == [1, 2] and meta["counts"]["rows_written"] == 40
    assert sorted(lance.dataset(out).to_table(columns=["id"]).column("id").to_pylist()) == \
        sorted(lance.dataset(whole).to_table(columns=["id"]).column("id").to_pylist())
    with pytest.raises(PrepError, match="max_length"):
        write_table(tokenize(items(second), tokenizer_dir, max_length=512), out, mode="append")
    assert lance.dataset(out).version == 2


def test_read_table_round_trips_and_refuses_what_is_not_a_finished_table(snippet_table, tmp_path):
    from prep.integrations.ray_data import read_table

    import ray

    got = pa.concat_tables(ray.get(read_table(snippet_table, columns=["id", "input_ids"]).to_arrow_refs()))
    want = lance.dataset(snippet_table).to_table(columns=["id", "input_ids"])
    assert got.sort_by("id").equals(want.sort_by("id"))
    assert read_table(snippet_table, version=1).count() == ROWS

    with pytest.raises(PrepError, match="rejects table"):
        read_table(snippet_table.replace(".lance", ".rejects.lance"))
    copy = str(tmp_path / "copy.lance")
    shutil.copytree(snippet_table, copy)
    ds = lance.dataset(copy)
    lance.LanceDataset.commit(copy, lance.LanceOperation.Append([]), read_version=ds.version,
                              commit_message=lance_tables._UNFINISHED)
    with pytest.raises(PrepError, match="did not finish.*version=1"):
        read_table(copy)


def global_batches(log: Path) -> dict[tuple[int, int], list[int]]:
    """(epoch, step) -> the ranks' ids put together in rank order; a step trained again after a restart
    (a rank reached it before the kill) counts as its last record."""
    seen: dict[tuple[int, int, int], tuple[int, list[int]]] = {}
    for line in log.read_text().splitlines():
        r = json.loads(line)
        seen[(r["epoch"], r["step"], r["rank"])] = (r["world"], r["ids"])
    steps = sorted({(e, s) for e, s, _ in seen})
    return {(e, s): [i for rank in range(seen[(e, s, 0)][0]) for i in seen[(e, s, rank)][1]] for e, s in steps}


@pytest.mark.slow
def test_ray_train_resumes_exactly_after_a_worker_is_killed_and_on_fewer_workers(snippet_table, tmp_path):
    from ray import cloudpickle

    from prep.reader import ReaderDataset

    sys.path.insert(0, str(REPO / "examples"))
    import ray_train

    cloudpickle.register_pickle_by_value(ray_train)  # the workers do not have examples/ on their path
    epochs = str(tmp_path / "epochs")
    assert cli_main(["materialize-shuffle", "--table", snippet_table, "--output", epochs, "--epochs", "1", "--splits", "2",
                     "--executor", "local"]) == 0
    steps = 6
    want = {(b.epoch, b.step): b.ids.tolist() for b, _ in zip(ReaderDataset(epochs, global_batch_size=4, rank=0, world_size=1), range(steps))}

    killed = tmp_path / "killed.jsonl"
    # a checkpoint at steps 3 and 6 only (each report with a checkpoint is a round of Ray Train's bookkeeping): the kill
    # before step 3 restarts from the one at 3, which the run on fewer workers continues from too
    result = ray_train.fit(epochs, str(tmp_path / "storage"), "killed", workers=2, global_batch=4, steps=steps, log=str(killed),
                           kill_after_step=3, ckpt_every=3)
    assert (tmp_path / "storage" / "killed.killed").exists() and result.metrics["step"] == steps
    assert global_batches(killed) == want

    at_3 = next(c for c, m in result.best_checkpoints if m["step"] == 3)
    fewer = tmp_path / "fewer.jsonl"
    ray_train.fit(epochs, str(tmp_path / "storage"), "fewer", workers=1, global_batch=4, steps=steps, log=str(fewer), resume_from=at_3.path,
                  ckpt_every=3)
    assert global_batches(fewer) == {k: v for k, v in want.items() if k[1] >= 3}


@pytest.mark.s3
@pytest.mark.slow
def test_write_table_and_read_table_on_s3(ray_local, s3_bucket, tokenizer_dir):
    """The workers get the driver's resolved storage options: they do not share its environment."""
    import ray

    from prep.integrations.ray_data import read_table, write_table

    out = f"s3://{s3_bucket}/t.lance"
    ds = items(gsm_rows(10) + [{"question": "q", "answer": None}])
    summary = write_table(tokenize(ds, tokenizer_dir), out, max_reject_fraction=0.2)
    assert (summary["rows_written"], summary["rows_rejected"], summary["rejects"]) == (10, 1, f"s3://{s3_bucket}/t.rejects.lance")
    assert cli_main(["inspect", out]) == 0
    got = pa.concat_tables(ray.get(read_table(out, columns=["id"]).to_arrow_refs()))
    assert got.num_rows == 10 and len(set(got.column("id").to_pylist())) == 10
