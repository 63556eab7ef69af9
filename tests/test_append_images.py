"""``decode-images --append`` / ``--update``: an image table grows by the image files (or shards,
Parquet files, manifests) it does not hold yet, one version per step.

The invariant every test checks: after each step the table (ids, labels, pixels, sources) and its
rejects equal a from-scratch run over the same files, and the rows it held before are untouched.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from conftest import REPO
from prep.cli import main
from prep.contracts.checksums import read_checksums
from prep.io.file_index import read_index
from prep.errors import PrepError
from prep.io import storage
from prep.io.table_checksums import check_table
from prep.prepare import faults
from prep.prepare.images.config import ImagesConfig
from prep.prepare.images.job import format_summary, run_decode_images

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities of TorchVision:DeprecationWarning")


def png(value: int, size: tuple[int, int] = (8, 6)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (value, 255 - value, value // 2)).save(buf, "PNG")
    return buf.getvalue()


def photo(path: Path, value: int, data: bytes | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png(value) if data is None else data)
    return path


def config(src: str | Path, out: str | Path, **keys) -> ImagesConfig:
    return ImagesConfig.model_validate({"input": str(src), "output": str(out), "size": 4, "executor": "local",
                                        "max_reject_fraction": 0.5, "images_per_chunk": 2, **keys})


def changed(cfg: ImagesConfig, **keys) -> ImagesConfig:
    return ImagesConfig.model_validate({**cfg.model_dump(), **keys})


def rows(uri: str, version: int | None = None) -> list:
    t = lance.dataset(uri, version=version, storage_options=storage.lance_storage_options(uri)).to_table(
        columns=["id", "label", "label_name", "source", "image"])
    return sorted(zip(*(t[c].to_pylist() for c in ("id", "label", "label_name", "source")), map(tuple, t["image"].to_pylist())))


def check_files(uri: str) -> list[str]:
    """The files the newest version's checksum record lists."""
    return list(read_checksums(lance.dataset(uri).schema.metadata, uri).files)


def rejects(uri: str) -> list:
    t = lance.dataset(uri, storage_options=storage.lance_storage_options(uri)).to_table(columns=["source", "position", "reason"])
    return sorted(zip(*(t[c].to_pylist() for c in t.column_names)))


def assert_from_scratch(cfg: ImagesConfig, ref_out: str) -> dict:
    """The table and rejects at ``cfg.output`` equal a from-scratch run's; returns the table's metadata."""
    ref = changed(cfg, output=ref_out, rejects=None, append=False, update=False, overwrite=True)
    run_decode_images(ref)
    assert rows(cfg.output) == rows(ref.output)
    assert rejects(cfg.rejects_uri) == rejects(ref.rejects_uri)
    meta, ref_meta = (json.loads(lance.dataset(u, storage_options=storage.lance_storage_options(u)).schema.metadata[b"prep"])
                      for u in (cfg.output, ref.output))
    assert meta["labels"] == ref_meta["labels"]
    for k in ("rows_read", "rows_written", "rows_rejected", "files_rejected", "bytes_read"):
        assert meta["counts"][k] == ref_meta["counts"][k], k
    for uri in (cfg.output, ref.output):  # every commit records the checksums of the files it holds (issue 31 #2)
        found = check_table(uri)
        assert found.recorded and found.ok, found
    return meta


@pytest.fixture
def tree(tmp_path) -> Path:
    """ants (2 photos), bees (1 photo, 1 corrupt file)."""
    src = tmp_path / "in"
    photo(src / "ants" / "a.png", 10)
    photo(src / "ants" / "b.png", 20)
    photo(src / "bees" / "c.png", 30)
    photo(src / "bees" / "bad.png", 0, b"\x89PNG\r\n\x1a\n not really")
    return src


def test_a_photo_added_to_a_class_folder_is_one_new_version_equal_to_a_from_scratch_run(tree, tmp_path):
    out = tmp_path / "t.lance"
    cfg = config(tree, out)
    run_decode_images(cfg)
    v1 = lance.dataset(out)
    files_v1 = {d.path: os.stat(out / "data" / d.path).st_mtime_ns for f in v1.get_fragments() for d in f.metadata.files}
    before = rows(str(out))
    photo(tree / "ants" / "d.png", 40)
    photo(tree / "bees" / "e.png", 50)
    summary = run_decode_images(changed(cfg, append=True))
    assert summary["step"] == {"version": 2, "added": 2, "replaced": 0, "unchanged": 4, "rows_added": 2, "rows_removed": 0, "removed": 0, "moved": [], "missing": []}
    assert summary["rows_read"] == 2  # only the new photos were read
    meta = assert_from_scratch(changed(cfg, append=True), str(tmp_path / "ref.lance"))
    assert set(before) < set(rows(str(out))) and rows(str(out), version=1) == before
    v2 = lance.dataset(out)
    assert [f.fragment_id for f in v2.get_fragments()][:len(v1.get_fragments())] == [f.fragment_id for f in v1.get_fragments()]
    assert {p: os.stat(out / "data" / p).st_mtime_ns for p in files_v1} == files_v1  # old data files untouched
    assert [(h["version"], h["files_added"], h["rows_added"], h["file_index"]) for h in meta["history"]] == [
        (1, 4, 3, "_prep_files/v1.parquet"), (2, 2, 2, "_prep_files/v2.parquet")]
    assert meta["sources"] == [{"uri": str(tree), "files": 6, "bytes": sum(p.stat().st_size for p in tree.rglob("*.png"))}]
    held = read_index(str(out), ["_prep_files/v1.parquet", "_prep_files/v2.parquet"], None)
    assert sorted(held) == sorted(str(p) for p in tree.rglob("*.png"))  # the rejected file is held too
    assert "appended to" in format_summary(summary) and "version 2: +2 files, +2 rows" in format_summary(summary)


def test_an_append_with_nothing_new_commits_nothing_and_says_so(tree, tmp_path):
    cfg = config(tree, tmp_path / "t.lance")
    run_decode_images(cfg)
    summary = run_decode_images(changed(cfg, append=True))
    assert format_summary(summary) == f"nothing new: {cfg.output} already holds all 4 listed file(s) as they are; no version committed"
    assert lance.dataset(cfg.output).version == 1 and lance.dataset(cfg.rejects_uri).version == 1


def test_a_changed_photo_is_refused_and_update_replaces_exactly_its_row(tree, tmp_path):
    cfg = config(tree, tmp_path / "t.lance")
    run_decode_images(cfg)
    before = {r[3]: r for r in rows(cfg.output)}
    photo(tree / "ants" / "a.png", 99, png(99, (9, 7)))  # another size: a changed file
    with pytest.raises(PrepError, match=r"a\.png changed since .* was made from it \(.*\): pass --update"):
        run_decode_images(changed(cfg, append=True))
    assert lance.dataset(cfg.output).version == 1
    summary = run_decode_images(changed(cfg, update=True))
    assert summary["step"] == {"version": 2, "added": 0, "replaced": 1, "unchanged": 3, "rows_added": 1, "rows_removed": 1, "removed": 0, "moved": [], "missing": []}
    assert "version 2: replaced 1 file, +1 rows, -1 rows" in format_summary(summary)
    assert_from_scratch(changed(cfg, update=True), str(tmp_path / "ref.lance"))
    after = {r[3]: r for r in rows(cfg.output)}
    a = str(tree / "ants" / "a.png")
    assert after[a][0] == before[a][0] and after[a][4] != before[a][4]  # the same id, the new pixels
    assert {k: v for k, v in after.items() if k != a} == {k: v for k, v in before.items() if k != a}


def test_a_rejected_photo_fixed_since_is_a_changed_file_and_update_replaces_its_reject(tree, tmp_path):
    cfg = config(tree, tmp_path / "t.lance")
    run_decode_images(cfg)
    bad = str(tree / "bees" / "bad.png")
    assert [r[0] for r in rejects(cfg.rejects_uri)] == [bad]
    photo(tree / "bees" / "bad.png", 77)
    with pytest.raises(PrepError, match="bad.png changed since"):
        run_decode_images(changed(cfg, append=True))
    summary = run_decode_images(changed(cfg, update=True))
    assert summary["step"]["replaced"] == 1 and summary["rows_written"] == 1 and summary["step"]["rows_removed"] == 0
    meta = assert_from_scratch(changed(cfg, update=True), str(tmp_path / "ref.lance"))
    assert rejects(cfg.rejects_uri) == [] and meta["counts"]["rows_rejected"] == 0 and meta["counts"]["rows_written"] == 4


def test_a_new_class_that_sorts_last_appends_and_one_that_would_renumber_is_refused(tree, tmp_path):
    cfg = config(tree, tmp_path / "t.lance")
    run_decode_images(cfg)
    photo(tree / "wasps" / "w.png", 60)
    run_decode_images(changed(cfg, append=True))
    meta = assert_from_scratch(changed(cfg, append=True), str(tmp_path / "ref.lance"))
    assert meta["labels"] == ["ants", "bees", "wasps"]
    photo(tree / "aphids" / "x.png", 70)
    with pytest.raises(PrepError, match="the new class 'aphids' sorts before 'wasps', so a from-scratch run would renumber them"):
        run_decode_images(changed(cfg, append=True))
    assert lance.dataset(cfg.output).version == 2
    pinned = config(tree, tmp_path / "pinned.lance", labels=["ants", "bees", "wasps"])  # labels: pins the numbering
    (tree / "aphids" / "x.png").unlink()
    run_decode_images(pinned)
    photo(tree / "aphids" / "x.png", 70)
    photo(tree / "ants" / "d.png", 40)
    summary = run_decode_images(changed(pinned, append=True))  # as a from-scratch run with these labels: a reject
    assert summary["rows_rejected"] == 1 and summary["rows_written"] == 1
    assert_from_scratch(changed(pinned, append=True), str(tmp_path / "ref.lance"))


def test_another_config_is_refused_naming_the_difference(tree, tmp_path):
    cfg = config(tree, tmp_path / "t.lance")
    run_decode_images(cfg)
    photo(tree / "ants" / "d.png", 40)
    with pytest.raises(PrepError, match=r"was made with config size=4, this job has 8"):
        run_decode_images(changed(cfg, append=True, size=8))


def test_an_image_table_made_before_file_indexes_is_refused_with_the_way_out(tree, tmp_path):
    cfg = config(tree, tmp_path / "t.lance")
    run_decode_images(cfg)
    ds = lance.dataset(cfg.output)
    meta = json.loads(ds.schema.metadata[b"prep"])
    for h in meta["history"]:  # as the prep before file indexes wrote it
        h.pop("file_index")
    ds.update_schema_metadata({"prep": json.dumps(meta)})
    photo(tree / "ants" / "d.png", 40)
    with pytest.raises(PrepError, match="records no id key per input file .* prepare it anew once with --overwrite"):
        run_decode_images(changed(cfg, append=True))


def shard(path: Path, samples: list[tuple[str, int, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for key, value, label in samples:
            for name, data in ((f"{key}.png", png(value)), (f"{key}.cls", label.encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def test_webdataset_shards_append_and_update_by_shard(tmp_path):
    src = tmp_path / "shards"
    shard(src / "s0.tar", [("a", 1, "0"), ("b", 2, "1")])
    cfg = config(src, tmp_path / "t.lance")
    run_decode_images(cfg)
    shard(src / "s1.tar", [("c", 3, "1"), ("d", 4, "9x")])  # "9x": a class name, no names known: a reject
    summary = run_decode_images(changed(cfg, append=True))
    assert summary["step"]["added"] == 1 and summary["rows_read"] == 2
    assert_from_scratch(changed(cfg, append=True), str(tmp_path / "ref.lance"))
    shard(src / "s1.tar", [("c", 5, "1"), ("d", 4, "0"), ("e", 6, "0")])
    summary = run_decode_images(changed(cfg, update=True))
    assert summary["step"] == {"version": 3, "added": 0, "replaced": 1, "unchanged": 1, "rows_added": 3, "rows_removed": 1, "removed": 0, "moved": [], "missing": []}
    meta = assert_from_scratch(changed(cfg, update=True), str(tmp_path / "ref.lance"))
    assert [Path(u).name for h in meta["history"] for u in h["added"] + h["replaced"]] == ["s0.tar", "s1.tar", "s1.tar"]


def test_a_new_parquet_file_appends(tmp_path):
    src = tmp_path / "pq"
    src.mkdir()

    def write(name: str, values: list[int]) -> None:
        pq.write_table(pa.table({"image": [png(v) for v in values], "label": ["cat" if v % 2 else "dog" for v in values]}), src / name)

    write("p0.parquet", [1, 2, 3])
    cfg = config(src, tmp_path / "t.lance")
    run_decode_images(cfg)
    write("p1.parquet", [4, 5])
    assert run_decode_images(changed(cfg, append=True))["step"]["added"] == 1
    assert assert_from_scratch(changed(cfg, append=True), str(tmp_path / "ref.lance"))["labels"] == ["cat", "dog"]


def test_a_new_manifest_appends_and_update_replaces_a_changed_ones_rows_and_rejects(tmp_path):
    images = tmp_path / "img"
    for i in range(4):
        photo(images / f"{i}.png", 10 * i)
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "m0.csv").write_text(f"path,label\n{images}/0.png,cat\n{images}/1.png,dog\n{images}/missing.png,cat\n")
    cfg = config(lists, tmp_path / "t.lance", source="manifest")
    run_decode_images(cfg)
    (lists / "m1.csv").write_text(f"path,label\n{images}/2.png,cat\n{images}/3.png,cat\n")
    summary = run_decode_images(changed(cfg, append=True))
    assert summary["step"]["added"] == 1 and summary["rows_read"] == 2
    assert_from_scratch(changed(cfg, append=True), str(tmp_path / "ref.lance"))
    (lists / "m0.csv").write_text(f"path,label\n{images}/0.png,cat\n{images}/1.png,dog\n{images}/gone.png,dog\n,cat\n")  # two rejects anew
    with pytest.raises(PrepError, match=r"m0\.csv changed since"):
        run_decode_images(changed(cfg, append=True))
    summary = run_decode_images(changed(cfg, update=True))
    assert summary["step"] == {"version": 3, "added": 0, "replaced": 1, "unchanged": 1, "rows_added": 2, "rows_removed": 2, "removed": 0, "moved": [], "missing": []}
    assert_from_scratch(changed(cfg, update=True), str(tmp_path / "ref.lance"))
    # the empty path is the 4th record after the header (issue 31 #10: 'data row N', as text CSV says; was 0-based 'row 3')
    assert [r[:2] for r in rejects(cfg.rejects_uri)] == [(str(images / "gone.png"), "image"), (str(lists / "m0.csv"), "data row 4")]


@pytest.mark.slow
def test_a_kill_between_the_rejects_and_the_table_commit_leaves_the_version_before_and_the_rerun_completes(tree, tmp_path):
    out = tmp_path / "t.lance"
    cfg = config(tree, out, images_per_chunk=256)  # the CLI's default
    run_decode_images(cfg)
    before = rows(str(out))
    photo(tree / "ants" / "d.png", 40)
    photo(tree / "bees" / "bad2.png", 0, b"GIF89a broken")
    args = [sys.executable, "-m", "prep", "decode-images", "--input", str(tree), "--output", str(out), "--size", "4",
            "--executor", "local", "--max-reject-fraction", "0.5", "--append"]
    env = {**os.environ, "PYTHONPATH": str(REPO), faults.ENV: "commit:kill:rejects"}
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert lance.dataset(out).version == 1 and rows(str(out)) == before and lance.dataset(cfg.rejects_uri).version == 2
    run_decode_images(changed(cfg, append=True))  # the plain rerun
    meta = assert_from_scratch(changed(cfg, append=True), str(tmp_path / "ref.lance"))
    assert [(h["version"], h["rejects_version"]) for h in meta["history"]] == [(1, 1), (2, 4)]  # 2: the killed step's, 3: 1 restored


def test_an_update_killed_between_its_rows_and_its_metadata_is_rebuilt_from_the_version_before(tree, tmp_path, monkeypatch):
    """An update that removes a whole fragment and part of another commits its rows, then its metadata."""
    cfg = config(tree, tmp_path / "t.lance")
    run_decode_images(cfg)
    photo(tree / "ants" / "d.png", 40)
    run_decode_images(changed(cfg, append=True))  # d.png alone in a fragment
    for name in ("a.png", "d.png"):
        photo(tree / "ants" / name, 90, png(90, (5, 9)))
    with monkeypatch.context() as m:
        m.setattr(lance.LanceOperation, "UpdateConfig", lambda **_: (_ for _ in ()).throw(KeyboardInterrupt("killed")))
        with pytest.raises(KeyboardInterrupt):
            run_decode_images(changed(cfg, update=True))
    assert lance.dataset(cfg.output).version == 3  # the rows, under version 2's metadata
    mine = Path(cfg.output) / "_prep_files" / "notes.txt"  # not prep's: stays
    mine.write_text("a user's file")
    summary = run_decode_images(changed(cfg, update=True))  # the plain rerun
    assert summary["step"]["replaced"] == 2 and summary["step"]["rows_removed"] == 2
    meta = assert_from_scratch(changed(cfg, update=True), str(tmp_path / "ref.lance"))
    assert [h["version"] for h in meta["history"]] == [1, 2, lance.dataset(cfg.output).version]
    assert any(p.startswith("_deletions/") for p in check_files(cfg.output))  # a kept fragment's deleted rows
    left = sorted(p.name for p in mine.parent.iterdir())  # the killed step's index dropped, the user's file kept
    assert left == sorted([Path(h["file_index"]).name for h in meta["history"]] + ["notes.txt"])


@pytest.mark.slow
def test_append_and_update_under_the_ray_executor_equal_a_from_scratch_run(ray_local, tree, tmp_path):
    cfg = config(tree, tmp_path / "t.lance", executor="ray")
    run_decode_images(cfg)
    photo(tree / "ants" / "d.png", 40)
    photo(tree / "ants" / "a.png", 99, png(99, (9, 7)))
    summary = run_decode_images(changed(cfg, update=True))
    assert summary["executor"] == "ray"
    assert summary["step"] == {"version": 2, "added": 1, "replaced": 1, "unchanged": 3, "rows_added": 2, "rows_removed": 1, "removed": 0, "moved": [], "missing": []}
    assert_from_scratch(changed(cfg, executor="local", update=True), str(tmp_path / "ref.lance"))


@pytest.mark.s3
def test_append_and_update_on_s3_equal_a_from_scratch_run(s3_bucket, tree, tmp_path):
    import boto3

    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")

    def upload(path: Path) -> None:
        client.upload_file(str(path), s3_bucket, f"in/{path.relative_to(tree)}")

    for p in sorted(tree.rglob("*.png")):
        upload(p)
    cfg = config(f"s3://{s3_bucket}/in", f"s3://{s3_bucket}/t.lance")
    run_decode_images(cfg)
    assert run_decode_images(changed(cfg, append=True))["step"]["version"] is None
    upload(photo(tree / "bees" / "e.png", 50))
    assert run_decode_images(changed(cfg, append=True))["step"]["added"] == 1
    upload(photo(tree / "ants" / "a.png", 51))  # the same size, a new ETag
    with pytest.raises(PrepError, match=r"a\.png changed since .*ETag"):
        run_decode_images(changed(cfg, append=True))
    assert run_decode_images(changed(cfg, update=True))["step"]["replaced"] == 1
    assert_from_scratch(changed(cfg, update=True), f"s3://{s3_bucket}/ref.lance")


def test_the_cli_appends_and_inspect_shows_the_history(tree, tmp_path, capsys):
    out = tmp_path / "t.lance"
    args = ["decode-images", "--input", str(tree), "--output", str(out), "--size", "4", "--executor", "local",
            "--max-reject-fraction", "0.5"]
    assert main(args) == 0
    photo(tree / "ants" / "d.png", 40)
    capsys.readouterr()
    assert main(args + ["--append"]) == 0
    assert f"appended to {out} (images): version 2, 1 new file(s), 0 replaced, 4 unchanged" in capsys.readouterr().out
    assert main(["inspect", str(out)]) == 0
    shown = capsys.readouterr().out
    assert ("  history:\n    version 1: +4 files, +3 rows (files listed in _prep_files/v1.parquet)\n"
            "    version 2: +1 file, +1 rows (files listed in _prep_files/v2.parquet)") in shown


def test_overwrite_replaces_a_text_table_with_an_image_table(tree, tmp_path, tokenizer_dir, shared_data):
    """Issue 31, finding 9: decode-images --overwrite over a pretokenized table failed "Append with different schema"."""
    from prep.prepare.text.pretokenize import PretokenizeConfig, run_pretokenize

    out = tmp_path / "t.lance"
    run_pretokenize(PretokenizeConfig.model_validate({"input": str(shared_data / "gsm8k" / "train.jsonl"), "output": str(out),
                                                      "tokenizer": tokenizer_dir, "format": "sft", "executor": "local"}))
    cfg = config(tree, out, overwrite=True)
    run_decode_images(cfg)
    assert_from_scratch(cfg, str(tmp_path / "ref.lance"))


def test_a_moved_photo_and_a_same_size_same_mtime_edit_update_to_a_from_scratch_run(tree, tmp_path):
    """Issue 31, finding 3, for image folders: a photo moved to another class folder, another edited keeping its size and mtime."""
    cfg = config(tree, tmp_path / "t.lance")
    run_decode_images(cfg)
    (tree / "bees" / "c.png").rename(tree / "ants" / "z.png")
    b = tree / "ants" / "b.png"
    st = b.stat()
    b.write_bytes(png(21))  # the same size: one pixel value differs
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert b.stat().st_size == st.st_size
    with pytest.raises(PrepError, match=r"b\.png changed since .*content sha256.*\(and 1 more\): pass --update"):
        run_decode_images(changed(cfg, append=True))
    summary = run_decode_images(changed(cfg, update=True))
    assert summary["step"]["moved"] == [[str(tree / "bees" / "c.png"), str(tree / "ants" / "z.png")]]
    assert summary["step"]["replaced"] == 1 and summary["step"]["rows_removed"] == 2
    assert_from_scratch(changed(cfg, update=True), str(tmp_path / "ref.lance"))
    assert run_decode_images(changed(cfg, update=True))["step"]["version"] is None  # the moved file is not held twice
    (tree / "ants" / "a.png").unlink()
    summary = run_decode_images(changed(cfg, update=True))
    assert summary["step"]["missing"] == [str(tree / "ants" / "a.png")] and "--remove-missing" in format_summary(summary)
    run_decode_images(changed(cfg, update=True, remove_missing=True))
    assert_from_scratch(changed(cfg, update=True), str(tmp_path / "ref.lance"))


def test_a_renamed_shard_is_moved_not_duplicated(tmp_path):
    src = tmp_path / "shards"
    shard(src / "s0.tar", [("a", 1, "0"), ("b", 2, "1")])
    shard(src / "s1.tar", [("c", 3, "1")])
    cfg = config(src, tmp_path / "t.lance")
    run_decode_images(cfg)
    (src / "s1.tar").rename(src / "s2.tar")
    summary = run_decode_images(changed(cfg, update=True))
    assert summary["step"]["moved"] == [[str(src / "s1.tar"), str(src / "s2.tar")]]
    meta = assert_from_scratch(changed(cfg, update=True), str(tmp_path / "ref.lance"))
    assert sorted(Path(s["uri"]).name for s in meta["sources"]) == ["s0.tar", "s2.tar"]


@pytest.mark.s3
def test_a_photo_moved_on_s3_is_moved_not_duplicated(s3_bucket, tree, tmp_path):
    import boto3

    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
    for p in sorted(tree.rglob("*.png")):
        client.upload_file(str(p), s3_bucket, f"in/{p.relative_to(tree)}")
    cfg = config(f"s3://{s3_bucket}/in", f"s3://{s3_bucket}/t.lance")
    run_decode_images(cfg)
    client.copy_object(Bucket=s3_bucket, Key="in/ants/z.png", CopySource={"Bucket": s3_bucket, "Key": "in/bees/c.png"})
    client.delete_object(Bucket=s3_bucket, Key="in/bees/c.png")
    summary = run_decode_images(changed(cfg, update=True))
    assert summary["step"]["moved"] == [[f"s3://{s3_bucket}/in/bees/c.png", f"s3://{s3_bucket}/in/ants/z.png"]]
    assert_from_scratch(changed(cfg, update=True), f"s3://{s3_bucket}/ref.lance")
