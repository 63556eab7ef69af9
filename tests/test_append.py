"""Growing a prepared table: ``--append`` adds new files as one version, ``--update`` replaces changed ones.

The invariant every test checks: after each step the table holds exactly the rows (ids,
tokens, loss masks) a from-scratch run over the same files gives, and the rows it held
before are still there, unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lance
import pytest

from conftest import GSM8K, REPO
from prep.cli import main
from prep.io.lease import LeaseHeld, take_lease
from prep.errors import PrepError
from prep.io import storage
from prep.prepare import faults
from prep.runtime.config import load_config
from prep.prepare.text.pretokenize import PretokenizeConfig, format_summary, run_pretokenize

LINES = GSM8K.read_text().splitlines() if GSM8K.is_file() else []


def write(path: Path, first: int, n: int, bad: int = 0) -> Path:
    """``n`` GSM8K rows from ``first`` (and ``bad`` malformed lines) as a JSONL file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(LINES[first:first + n] + ["{not json"] * bad) + "\n")
    return path


def config(src: Path | list[Path], out: Path, tokenizer: str, **keys) -> PretokenizeConfig:
    given = [str(p) for p in src] if isinstance(src, list) else str(src)
    return PretokenizeConfig.model_validate({"input": given, "output": str(out), "tokenizer": tokenizer, "format": "sft",
                                             "executor": "local", "chunk_bytes": 4096, "max_reject_fraction": 0.5, **keys})


def changed(cfg, **keys):
    """``cfg`` with ``keys`` changed, validated as a config file would be."""
    return type(cfg).model_validate({**cfg.model_dump(), **keys})


def rows(uri: str, version: int | None = None) -> set:
    t = lance.dataset(uri, version=version, storage_options=storage.lance_storage_options(uri)).to_table(columns=["id", "input_ids", "loss_mask"])
    return set(zip(t["id"].to_pylist(), map(tuple, t["input_ids"].to_pylist()), map(tuple, t["loss_mask"].to_pylist())))


def rejects(uri: str) -> list:
    t = lance.dataset(uri, storage_options=storage.lance_storage_options(uri)).to_table(columns=["source", "position", "reason"])
    return sorted(zip(*(t[c].to_pylist() for c in t.column_names)))


def from_scratch(cfg: PretokenizeConfig, out: Path) -> PretokenizeConfig:
    ref = changed(cfg, output=str(out), rejects=None, append=False, update=False, overwrite=out.exists())
    run_pretokenize(ref)
    return ref


@pytest.fixture
def corpus(tmp_path, shared_data) -> Path:
    src = tmp_path / "in"
    write(src / "a.jsonl", 0, 12, bad=1)
    write(src / "b.jsonl", 12, 8)
    return src


def test_each_append_equals_a_from_scratch_run_and_keeps_the_rows_before(corpus, tokenizer_dir, tmp_path):
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir)
    run_pretokenize(cfg)
    grow = changed(cfg, append=True)
    steps = [lambda: write(corpus / "c.jsonl", 20, 6, bad=2), lambda: (write(corpus / "sub" / "d.jsonl", 26, 5), write(corpus / "e.jsonl", 31, 4))]
    for i, add in enumerate(steps):
        before, fragments = rows(str(out)), [f.fragment_id for f in lance.dataset(out).get_fragments()]
        add()
        summary = run_pretokenize(grow)
        ref = from_scratch(cfg, tmp_path / "ref.lance")
        assert rows(str(out)) == rows(ref.output) and before < rows(str(out))
        assert rejects(cfg.rejects_uri) == rejects(ref.rejects_uri)
        assert [f.fragment_id for f in lance.dataset(out).get_fragments()][:len(fragments)] == fragments  # a Merge: ids kept
        assert summary["step"] == {"version": i + 2, "added": i + 1, "replaced": 0, "unchanged": 2 + i, "rows_added": summary["rows_written"],
                                   "rows_removed": 0, "removed": 0, "moved": [], "missing": []}
    meta = json.loads(lance.dataset(out).schema.metadata[b"prep"])
    assert [(h["version"], [Path(u).name for u in h["added"]]) for h in meta["history"]] == [
        (1, ["a.jsonl", "b.jsonl"]), (2, ["c.jsonl"]), (3, ["e.jsonl", "d.jsonl"])]
    assert meta["counts"]["rows_written"] == lance.dataset(out).count_rows() == sum(h["rows_added"] for h in meta["history"])
    assert meta["counts"]["rows_rejected"] == len(rejects(cfg.rejects_uri)) == 3
    assert rows(str(out), version=1) == rows(str(out), version=1)  # the first version is still readable as it was
    assert lance.dataset(out, version=1).count_rows() == meta["history"][0]["rows_added"]


def test_a_second_append_with_nothing_new_commits_nothing_and_says_so(corpus, tokenizer_dir, tmp_path):
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir)
    run_pretokenize(cfg)
    summary = run_pretokenize(changed(cfg, append=True))
    assert format_summary(summary).startswith(f"nothing new: {out} already holds all 2 listed file(s) as they are")
    assert lance.dataset(out).version == 1 and lance.dataset(cfg.rejects_uri).version == 1


def test_a_changed_file_is_refused_and_update_replaces_exactly_its_rows(corpus, tokenizer_dir, tmp_path):
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir)
    run_pretokenize(cfg)
    before = rows(str(out))
    write(corpus / "a.jsonl", 0, 14)  # the same 12 rows first, then two more where the bad line was
    write(corpus / "c.jsonl", 40, 3)
    with pytest.raises(PrepError, match=r"a\.jsonl changed since .* \(size .* bytes\): pass --update"):
        run_pretokenize(changed(cfg, append=True))
    assert lance.dataset(out).version == 1
    summary = run_pretokenize(changed(cfg, update=True))
    ref = from_scratch(cfg, tmp_path / "ref.lance")
    assert rows(str(out)) == rows(ref.output) and before < rows(str(out))  # rows that did not move keep their ids
    assert rejects(cfg.rejects_uri) == rejects(ref.rejects_uri) == []
    assert summary["step"] == {"version": 2, "added": 1, "replaced": 1, "unchanged": 1, "rows_added": 17, "rows_removed": 12, "removed": 0, "moved": [], "missing": []}
    assert "replaced 1 file (a.jsonl), +17 rows, -12 rows" in format_summary(summary)
    meta = json.loads(lance.dataset(out).schema.metadata[b"prep"])
    assert meta["counts"]["rows_written"] == 8 + 17 and meta["counts"]["rows_rejected"] == 0


def test_appending_with_another_config_is_refused_naming_the_difference(corpus, tokenizer_dir, tmp_path):
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir)
    run_pretokenize(cfg)
    write(corpus / "c.jsonl", 20, 3)
    for change, named in [({"max_length": 64, "overlong": "truncate"}, "config max_length=None, this job has 64"),
                          ({"format": "pretrain", "text_column": "question"}, "config format='sft', this job has 'pretrain'"),
                          ({"pack": {"seq_len": 64}}, "config pack=None")]:
        with pytest.raises(PrepError, match=f"was made with {named}.*prepare anew with --overwrite"):
            run_pretokenize(changed(cfg, append=True, **change))
    assert lance.dataset(out).version == 1
    with pytest.raises(PrepError, match="overwrite and append are exclusive"):
        load_config(PretokenizeConfig, **{**cfg.model_dump(), "overwrite": True, "append": True})


def test_an_input_beside_the_tables_root_is_refused_because_every_id_would_change(corpus, tokenizer_dir, tmp_path):
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir)
    run_pretokenize(cfg)
    other = write(tmp_path / "more" / "c.jsonl", 20, 3)
    for given in ([other.parent], [corpus, other.parent]):
        with pytest.raises(PrepError, match=f"lies outside {corpus}, the folder the table's row ids are relative to"):
            run_pretokenize(config(given, out, tokenizer_dir, append=True))
    inside = write(corpus / "deeper" / "c.jsonl", 20, 3)  # an input inside the root: ids as a from-scratch run gives them
    run_pretokenize(config(inside.parent, out, tokenizer_dir, append=True))
    assert rows(str(out)) == rows(from_scratch(cfg, tmp_path / "ref.lance").output)


def test_a_packed_table_grows_like_a_from_scratch_run(corpus, tokenizer_dir, tmp_path):
    """Packing never crosses a chunk, and a chunk never crosses a file: new files pack as they would from scratch."""
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir, format="pretrain", text_column="question", pack={"seq_len": 64})
    run_pretokenize(cfg)
    write(corpus / "c.jsonl", 20, 9)
    run_pretokenize(changed(cfg, append=True))
    t, ref = lance.dataset(out).to_table(), lance.dataset(from_scratch(cfg, tmp_path / "ref.lance").output).to_table()
    key = lambda r: r["id"]  # noqa: E731
    assert sorted(t.to_pylist(), key=key) == sorted(ref.to_pylist(), key=key)


def test_an_append_to_no_table_is_a_first_run(corpus, tokenizer_dir, tmp_path):
    cfg = config(corpus, tmp_path / "t.lance", tokenizer_dir, append=True)
    summary = run_pretokenize(cfg)
    assert summary["step"]["version"] == 1 and rows(cfg.output) == rows(from_scratch(cfg, tmp_path / "ref.lance").output)


def test_an_append_while_another_writes_the_table_fails_at_once_and_changes_nothing(corpus, tokenizer_dir, tmp_path):
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir)
    run_pretokenize(cfg)
    write(corpus / "c.jsonl", 20, 3)
    other = take_lease(str(out), "pretokenize")  # another append, alive and writing
    try:
        with pytest.raises(LeaseHeld, match="is being written by pretokenize"):
            run_pretokenize(changed(cfg, append=True))
    finally:
        other.release()
    assert lance.dataset(out).version == 1
    assert run_pretokenize(changed(cfg, append=True))["step"]["version"] == 2


def edit_metadata(out: Path, edit) -> None:
    """Rewrites the table's prep metadata in place with ``edit(meta)``, as an older prep would have written it."""
    ds = lance.dataset(out)
    meta = json.loads(ds.schema.metadata[b"prep"])
    edit(meta)
    ds.update_schema_metadata({"prep": json.dumps(meta)})


def test_a_table_without_id_keys_is_refused_with_the_way_out(corpus, tokenizer_dir, tmp_path):
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir)
    run_pretokenize(cfg)
    edit_metadata(out, lambda meta: [s.pop("key") for s in meta["sources"]])  # as a table prep made before --append existed
    write(corpus / "c.jsonl", 20, 3)
    with pytest.raises(PrepError, match="records no id key per input file .* prepare it anew once with --overwrite"):
        run_pretokenize(changed(cfg, append=True))


def test_a_config_key_the_tables_prep_did_not_have_compares_as_its_default(corpus, tokenizer_dir, tmp_path):
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir)
    run_pretokenize(cfg)
    edit_metadata(out, lambda meta: [meta["config"].pop(k) for k in ("text_unit", "passthrough")])  # as a prep before those keys existed wrote it
    write(corpus / "c.jsonl", 20, 3)
    assert run_pretokenize(changed(cfg, append=True))["step"]["added"] == 1
    with pytest.raises(PrepError, match="was made with config text_unit='paragraph', this job has 'line'"):
        write(corpus / "d.jsonl", 23, 3)
        run_pretokenize(changed(cfg, append=True, text_unit="line"))


def test_the_cli_takes_append_and_update_and_refuses_them_with_overwrite(corpus, tokenizer_dir, tmp_path, capsys):
    args = ["pretokenize", "--input", str(corpus), "--output", str(tmp_path / "t.lance"), "--tokenizer", tokenizer_dir,
            "--format", "sft", "--executor", "local", "--max-reject-fraction", "0.5"]
    assert main(args) == 0
    write(corpus / "c.jsonl", 20, 3)
    assert main(args + ["--append"]) == 0
    assert "appended to" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "t.lance")]) == 0
    shown = capsys.readouterr().out
    assert "  history:\n    version 1: +2 files (a.jsonl, b.jsonl), +20 rows" in shown and "version 2: +1 file (c.jsonl), +3 rows" in shown
    assert main(args + ["--append", "--overwrite"]) == 2
    assert "argument --overwrite: not allowed with argument --append" in capsys.readouterr().err


# --- kills at the commit points of an append ----------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("point", ["claimed", "rejects", "table"])
def test_a_kill_during_an_append_leaves_the_version_before_and_the_rerun_completes(point, corpus, tokenizer_dir, tmp_path):
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir, chunk_bytes=2 << 20)  # the CLI's default
    run_pretokenize(cfg)
    before = rows(str(out))
    write(corpus / "c.jsonl", 20, 6, bad=2)
    args = [sys.executable, "-m", "prep", "pretokenize", "--input", str(corpus), "--output", str(out), "--tokenizer", tokenizer_dir,
            "--format", "sft", "--executor", "local", "--max-reject-fraction", "0.5", "--append"]
    env = {**os.environ, "PYTHONPATH": str(REPO), faults.ENV: f"commit:kill:{point}"}
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert rows(str(out), version=1) == before
    run_pretokenize(changed(cfg, append=True))
    ref = from_scratch(cfg, tmp_path / "ref.lance")
    assert rows(str(out)) == rows(ref.output) and rejects(cfg.rejects_uri) == rejects(ref.rejects_uri)
    assert [h["version"] for h in json.loads(lance.dataset(out).schema.metadata[b"prep"])["history"]] == [1, 2]


# --- object storage and Ray ------------------------------------------------------------------------

@pytest.mark.s3
def test_append_on_s3_equals_a_from_scratch_run(s3_bucket, corpus, tokenizer_dir, tmp_path):
    import boto3

    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
    for f in sorted(corpus.glob("*.jsonl")):
        client.upload_file(str(f), s3_bucket, f"in/{f.name}")
    src, out = f"s3://{s3_bucket}/in", f"s3://{s3_bucket}/t.lance"
    cfg = PretokenizeConfig.model_validate(dict(input=src, output=out, tokenizer=tokenizer_dir, format="sft", executor="local",
                                                chunk_bytes=4096, max_reject_fraction=0.5))
    run_pretokenize(cfg)
    assert run_pretokenize(changed(cfg, append=True))["step"]["version"] is None
    client.upload_file(str(write(tmp_path / "c.jsonl", 20, 6, bad=1)), s3_bucket, "in/c.jsonl")
    summary = run_pretokenize(changed(cfg, append=True))
    assert summary["step"]["added"] == 1 and summary["step"]["version"] == 2
    client.upload_file(str(write(tmp_path / "c.jsonl", 20, 7)), s3_bucket, "in/c.jsonl")  # a new ETag and size
    with pytest.raises(PrepError, match="c.jsonl changed since"):
        run_pretokenize(changed(cfg, append=True))
    run_pretokenize(changed(cfg, update=True))
    ref = changed(cfg, output=f"s3://{s3_bucket}/ref.lance")
    run_pretokenize(ref)
    assert rows(out) == rows(ref.output) and rejects(cfg.rejects_uri) == rejects(ref.rejects_uri)


@pytest.mark.slow
def test_append_under_the_ray_executor_equals_a_from_scratch_run(ray_local, corpus, tokenizer_dir, tmp_path):
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir, executor="ray")
    run_pretokenize(cfg)
    write(corpus / "c.jsonl", 20, 6, bad=1)
    summary = run_pretokenize(changed(cfg, append=True))
    assert summary["executor"] == "ray" and summary["step"]["added"] == 1
    ref = from_scratch(changed(cfg, executor="local"), tmp_path / "ref.lance")
    assert rows(str(out)) == rows(ref.output) and rejects(cfg.rejects_uri) == rejects(ref.rejects_uri)


def test_a_deleted_rejects_table_is_refused_before_anything_is_committed(corpus, tokenizer_dir, tmp_path):
    """Issue 31, finding 8: the append committed its table version, then exited 2 "row accounting failed"."""
    import shutil

    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir)
    run_pretokenize(cfg)
    shutil.rmtree(cfg.rejects_uri)
    write(corpus / "c.jsonl", 20, 6)
    with pytest.raises(PrepError, match=r"t\.rejects\.lance.* is missing.*--overwrite") as err:
        run_pretokenize(changed(cfg, append=True))
    assert "please report" not in str(err.value)
    assert lance.dataset(out).version == 1 and not Path(cfg.rejects_uri).exists()


@pytest.mark.parametrize("first,then", [({}, {"pack": {"seq_len": 128}}), ({"pack": {"seq_len": 128}}, {})])
def test_overwrite_replaces_a_table_of_another_schema(first, then, corpus, tokenizer_dir, tmp_path):
    """Issue 31, finding 9: a packed --overwrite of an unpacked table failed "Append with different schema", blaming an input."""
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir, format="pretrain", text_column="question", **first)
    run_pretokenize(cfg)
    again = changed(cfg, overwrite=True, **then) if then else changed(cfg, overwrite=True, pack=None)
    run_pretokenize(again)
    ref = from_scratch(again, tmp_path / "ref.lance")
    got, want = lance.dataset(out), lance.dataset(ref.output)
    assert got.schema.names == want.schema.names and got.to_table().equals(want.to_table())


def same_size_edit(path: Path) -> None:
    """Changes one digit of ``path``, keeping its size and its mtime (as ``touch -r`` does)."""
    st, data = path.stat(), path.read_bytes()
    i = next(i for i, b in enumerate(data) if chr(b).isdigit())
    path.write_bytes(data[:i] + (b"7" if data[i:i + 1] != b"7" else b"3") + data[i + 1:])
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def test_a_renamed_file_is_moved_not_duplicated_and_update_equals_a_from_scratch_run(corpus, tokenizer_dir, tmp_path):
    """Issue 31, finding 3: after renaming c.jsonl to d.jsonl, --update held c's rows twice."""
    out = tmp_path / "t.lance"
    write(corpus / "c.jsonl", 20, 6, bad=1)
    cfg = config(corpus, out, tokenizer_dir)
    run_pretokenize(cfg)
    (corpus / "c.jsonl").rename(corpus / "d.jsonl")
    with pytest.raises(PrepError, match=r"c\.jsonl moved to .*d\.jsonl \(the same content\).*pass --update"):
        run_pretokenize(changed(cfg, append=True))
    summary = run_pretokenize(changed(cfg, update=True))
    ref = from_scratch(cfg, tmp_path / "ref.lance")
    assert rows(str(out)) == rows(ref.output) and rejects(cfg.rejects_uri) == rejects(ref.rejects_uri)
    assert summary["step"]["moved"] == [[str(corpus / "c.jsonl"), str(corpus / "d.jsonl")]] and summary["step"]["removed"] == 1
    assert f"moved: {corpus / 'c.jsonl'} -> {corpus / 'd.jsonl'}" in format_summary(summary)
    meta = json.loads(lance.dataset(out).schema.metadata[b"prep"])
    assert sorted(Path(s["uri"]).name for s in meta["sources"]) == ["a.jsonl", "b.jsonl", "d.jsonl"]
    assert meta["counts"]["rows_written"] == lance.dataset(out).count_rows() and meta["history"][-1]["removed"] == [str(corpus / "c.jsonl")]
    assert run_pretokenize(changed(cfg, update=True))["step"]["version"] is None  # and the next update finds nothing new


def test_an_edit_that_keeps_size_and_mtime_is_caught_and_update_equals_a_from_scratch_run(corpus, tokenizer_dir, tmp_path):
    """Issue 31, finding 3: an edit with touch -r was "nothing new" and the stale row stayed."""
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir)
    run_pretokenize(cfg)
    same_size_edit(corpus / "a.jsonl")
    with pytest.raises(PrepError, match=r"a\.jsonl changed since .*\(content sha256:.*\): pass --update"):
        run_pretokenize(changed(cfg, append=True))
    assert run_pretokenize(changed(cfg, update=True))["step"]["replaced"] == 1
    ref = from_scratch(cfg, tmp_path / "ref.lance")
    assert rows(str(out)) == rows(ref.output) and rejects(cfg.rejects_uri) == rejects(ref.rejects_uri)


def test_a_touched_file_with_the_same_bytes_is_unchanged(corpus, tokenizer_dir, tmp_path):
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir)
    run_pretokenize(cfg)
    os.utime(corpus / "a.jsonl", (1, 1))  # a new mtime and ctime, the same content
    assert run_pretokenize(changed(cfg, append=True))["step"]["version"] is None


def test_a_missing_file_is_named_and_remove_missing_removes_its_rows(corpus, tokenizer_dir, tmp_path):
    """Issue 31, finding 3: a file that disappeared kept its rows without a word in the summary."""
    out = tmp_path / "t.lance"
    cfg = config(corpus, out, tokenizer_dir)
    run_pretokenize(cfg)
    gone = corpus / "a.jsonl"
    gone.unlink()
    summary = run_pretokenize(changed(cfg, append=True))
    assert summary["step"]["missing"] == [str(gone)] and lance.dataset(out).version == 1
    assert f"1 file(s) the table holds are not among the inputs; their rows stay (--remove-missing removes them): {gone}" in format_summary(summary)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(json.dumps(cfg.model_dump(mode="json", exclude={"s3", "rejects"})))  # JSON is YAML
    assert main(["pretokenize", "--config", str(recipe), "--append", "--remove-missing", "-q"]) == 0
    ref = from_scratch(cfg, tmp_path / "ref.lance")
    assert rows(str(out)) == rows(ref.output) and rejects(cfg.rejects_uri) == rejects(ref.rejects_uri) == []
    meta = json.loads(lance.dataset(out).schema.metadata[b"prep"])
    assert meta["counts"]["rows_rejected"] == 0 and meta["history"][-1]["files_removed"] == 1
    with pytest.raises(ValueError, match="remove_missing .* give it with append or update"):
        changed(cfg, remove_missing=True)


@pytest.mark.s3
def test_a_rename_on_s3_is_a_move_and_update_equals_a_from_scratch_run(s3_bucket, corpus, tokenizer_dir, tmp_path):
    import boto3

    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
    write(corpus / "c.jsonl", 20, 6)
    for f in sorted(corpus.glob("*.jsonl")):
        client.upload_file(str(f), s3_bucket, f"in/{f.name}")
    src, out = f"s3://{s3_bucket}/in", f"s3://{s3_bucket}/t.lance"
    cfg = config(corpus, tmp_path / "unused", tokenizer_dir).model_copy(update={"input": src, "output": out})
    cfg = changed(cfg)
    run_pretokenize(cfg)
    client.copy_object(Bucket=s3_bucket, Key="in/d.jsonl", CopySource={"Bucket": s3_bucket, "Key": "in/c.jsonl"})
    client.delete_object(Bucket=s3_bucket, Key="in/c.jsonl")
    summary = run_pretokenize(changed(cfg, update=True))
    assert summary["step"]["moved"] == [[f"{src}/c.jsonl", f"{src}/d.jsonl"]]
    ref = changed(cfg, output=f"s3://{s3_bucket}/ref.lance", rejects=None, update=False)
    run_pretokenize(ref)
    assert rows(out) == rows(ref.output)
