"""A prepared table carries the checksums of its files, written at its commit (issue 31 #2).

Every writer records them (pretokenize, decode-images, ``--append``/``--update``, both
executors, local and s3://); ``prep verify TABLE`` names a damaged file, materialize
refuses a damaged table (single and mixture) before it reads a row, and ``prep verify``
of an output names its damaged source table.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from pathlib import Path

import lance
import pytest

import tables
from conftest import GSM8K
from prep.cli import main as cli_main
from prep.contracts.checksums import CHECKSUMS_KEY, FileChecksum, TableChecksums, parse_checksums, read_checksums
from prep.errors import PrepError
from prep.io import storage
from prep.io.table_checksums import check_table, fragment_files
from prep.materialize import materialize_mixture, materialize_shuffle
from prep.materialize.verify import verify
from prep.plan.spec import MixtureSource, MixtureSpec, PlanSpec
from prep.prepare.text.pretokenize import PretokenizeConfig, run_pretokenize

LINES = GSM8K.read_text().splitlines() if GSM8K.is_file() else []


def write(path: Path, first: int, n: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(LINES[first:first + n]) + "\n")
    return path


def pretokenize(src: Path | str, out: str, tokenizer: str, **keys) -> dict:
    return run_pretokenize(PretokenizeConfig.model_validate(
        {"input": str(src), "output": out, "tokenizer": tokenizer, "format": "sft", "executor": "local",
         "chunk_bytes": 4096, **keys}))


def recorded(uri: str, s3=None) -> TableChecksums:
    ds = lance.dataset(uri, storage_options=storage.lance_storage_options(uri, s3))
    record = read_checksums(ds.schema.metadata, uri)
    assert record is not None and sorted(record.files) == sorted(fragment_files(f.metadata for f in ds.get_fragments()))
    return record


def data_files(table: str) -> list[str]:
    return sorted(glob.glob(os.path.join(table, "data", "*.lance")))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, shared_data, tokenizer_dir) -> str:
    """A pretokenized GSM8K table of several data files (one per chunk)."""
    root = tmp_path_factory.mktemp("checked")
    write(root / "in" / "a.jsonl", 0, 40)
    out = str(root / "t.lance")
    pretokenize(root / "in", out, tokenizer_dir)
    return out


@pytest.fixture
def table(prepared, tmp_path) -> str:
    """A fresh copy of the prepared table (tests damage it)."""
    return shutil.copytree(prepared, str(tmp_path / "t.lance"))


def test_the_record_is_one_typed_form_with_one_strict_parser():
    record = TableChecksums(files={"data/a.lance": FileChecksum(size=12, sha256="a" * 64),
                                   "_deletions/0-1-2.arrow": FileChecksum(size=0, sha256="b" * 64)})
    assert parse_checksums(json.loads(json.dumps(record.to_json()))) == record
    for bad, says in [({"files": {}}, "must be an object with keys"),
                      ({**record.to_json(), "algorithm": "md5"}, "algorithm='md5'"),
                      ({**record.to_json(), "files": {"data/a.lance": [-1, "a" * 64]}}, r"files\['data/a.lance'\]"),
                      ({**record.to_json(), "files": {"data/a.lance": [1, "xyz"]}}, "64 hex digits")]:
        with pytest.raises(PrepError, match=says):
            parse_checksums(bad)
    with pytest.raises(PrepError, match=r"t.lance: its file checksums .* are not valid JSON"):
        read_checksums({CHECKSUMS_KEY: b"{"}, "t.lance")


def test_pretokenize_records_every_file_and_verify_table_passes(prepared, capsys):
    assert len(data_files(prepared)) > 1 and recorded(prepared)
    assert cli_main(["verify", prepared]) == 0
    assert f"{prepared} (version 1): OK: {len(data_files(prepared))} files" in capsys.readouterr().out


def test_flipped_bytes_in_a_table_are_named_by_verify_and_refused_by_materialize(table, tmp_path, capsys):
    """Issue 31 #2: inspect, materialize and verify all passed a table whose rows held other tokens."""
    damaged = data_files(table)[1]
    tables.flip_bytes(damaged)
    name = f"data/{os.path.basename(damaged)}"
    assert cli_main(["verify", table]) == 1
    err = capsys.readouterr().err
    assert f"FAILED: {name}: sha256 " in err and "recorded at its commit: the file is damaged" in err, err
    with pytest.raises(PrepError, match=rf"table {table} \(version 1\) is damaged: {name}: sha256 .*prep verify {table}"):
        materialize_shuffle(table=table, output=str(tmp_path / "out"), epochs=1, splits=2, executor="local")
    assert not os.path.exists(tmp_path / "out" / "manifest.json")
    plan = PlanSpec(num_splits=2, mixture=MixtureSpec(sources=(MixtureSource(table=table, weight=1),), weight_by="rows",
                                                      global_batch=4))
    with pytest.raises(PrepError, match=rf"table {table} \(version 1\) is damaged: {name}"):
        materialize_mixture(mixture=plan, output=str(tmp_path / "mix"), epochs=1, executor="local")


def test_verify_of_an_output_names_its_damaged_source_table(table, tmp_path):
    out = str(tmp_path / "out")
    materialize_shuffle(table=table, output=out, epochs=1, splits=2, executor="local")
    assert verify(out).ok
    damaged = data_files(table)[0]
    tables.flip_bytes(damaged)
    problems = verify(out).problems
    assert any(p.startswith(f"source table {table} (version 1): data/{os.path.basename(damaged)}: sha256") for p in problems)


def test_a_missing_file_is_named_and_one_added_outside_prep_is_a_note(table, capsys):
    lance.write_dataset(lance.dataset(table).to_table().slice(0, 3), table, mode="append")  # keeps the old record
    assert cli_main(["verify", table]) == 0
    assert "note: 1 files were not written by a prep commit (added outside prep), not checked" in capsys.readouterr().out
    gone = sorted(read_checksums(lance.dataset(table).schema.metadata, table).files)[0]
    os.remove(os.path.join(table, gone))
    assert cli_main(["verify", table]) == 1
    assert f"{gone} is missing" in capsys.readouterr().err


def test_append_and_update_record_the_files_they_keep_and_add(tmp_path, shared_data, tokenizer_dir):
    src, out = tmp_path / "in", str(tmp_path / "t.lance")
    write(src / "a.jsonl", 0, 12)
    write(src / "b.jsonl", 12, 8)
    pretokenize(src, out, tokenizer_dir)
    first = recorded(out)
    write(src / "c.jsonl", 20, 6)
    pretokenize(src, out, tokenizer_dir, append=True)
    grown = recorded(out)
    assert first.files.items() < grown.files.items()  # the files kept keep the digests of their commit
    write(src / "a.jsonl", 0, 14)  # changed: --update deletes its rows (a deletion file) and adds the new ones
    pretokenize(src, out, tokenizer_dir, update=True)
    updated = recorded(out)
    assert [p for p in updated.files if p.startswith("_deletions/")] or set(first.files) - set(updated.files)
    assert check_table(out).ok and lance.dataset(out).version == 3
    assert check_table(out, version=2).ok and check_table(out, version=1).ok


def test_decode_images_records_its_files(ray_local, tmp_path):
    from prep.prepare.images.config import ImagesConfig
    from prep.prepare.images.job import run_decode_images
    from prep.runtime.config import load_config
    from test_images import HYMENOPTERA

    if not HYMENOPTERA.is_dir():
        pytest.skip(f"real photos not found at {HYMENOPTERA}")
    root = tmp_path / "photos"
    for cls in ("ants", "bees"):
        (root / cls).mkdir(parents=True)
        for p in sorted((HYMENOPTERA / cls).iterdir())[:4]:
            shutil.copy(p, root / cls / p.name)
    out = str(tmp_path / "img.lance")
    cfg = load_config(ImagesConfig, Path(__file__).resolve().parent.parent / "configs" / "imagefolder.yaml",
                      input=str(root), output=out, executor="local")
    run_decode_images(cfg)
    assert recorded(out) and check_table(out).ok


@pytest.mark.slow
def test_the_ray_executor_records_the_same_files(ray_local, tmp_path, shared_data, tokenizer_dir):
    src = write(tmp_path / "in" / "a.jsonl", 0, 30)
    out = str(tmp_path / "t.lance")
    pretokenize(src, out, tokenizer_dir, executor="ray")
    assert recorded(out) and check_table(out).ok


@pytest.mark.s3
def test_an_s3_table_records_its_files_and_verify_names_a_damaged_one(s3_bucket, tmp_path, shared_data, tokenizer_dir,
                                                                      capsys):
    src, out = write(tmp_path / "in" / "a.jsonl", 0, 30), f"s3://{s3_bucket}/t.lance"
    pretokenize(src.parent, out, tokenizer_dir)
    record = recorded(out)
    assert cli_main(["verify", out]) == 0
    name = sorted(p for p in record.files if p.startswith("data/"))[0]
    fs, path = storage.filesystem(storage.join(out, name))
    data = bytearray(fs.cat_file(path))
    data[len(data) // 2] ^= 0xFF
    fs.pipe_file(path, bytes(data))
    capsys.readouterr()
    assert cli_main(["verify", out]) == 1
    assert f"FAILED: {name}: sha256 " in capsys.readouterr().err


def test_a_table_without_a_record_is_said_and_not_refused(tmp_path, capsys):
    """A table an older prep wrote (no record): verify says its files cannot be checked; materialize reads it."""
    old = str(tmp_path / "old.lance")
    rows = lance.dataset(tables.synthetic_table(str(tmp_path / "t.lance"), num_rows=50)).to_table()
    lance.write_dataset(rows.replace_schema_metadata({b"prep": rows.schema.metadata[b"prep"]}), old)
    assert cli_main(["verify", old]) == 0
    assert "no file checksums recorded (written before prep recorded them)" in capsys.readouterr().out
    assert check_table(old).recorded is False
    materialize_shuffle(table=old, output=str(tmp_path / "out"), epochs=1, splits=2, executor="local")
    assert verify(str(tmp_path / "out")).ok
