"""prep prewarm: one rank's splits copied to a local cache, verified, idempotent; S3 end to end."""

from __future__ import annotations

import glob
import json
import os
import shutil
from dataclasses import replace

import lance
import pytest

import tables
from prep.cli import main as cli_main
from prep.contracts.cache_marker import CACHE_MARKER, CacheMarker
from prep.errors import PrepError
from prep.contracts.manifest import split_path
from prep.materialize import materialize_shuffle
from prep.cache.prewarm import prewarm
from prep.materialize.verify import verify

@pytest.fixture(scope="module")
def materialized(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("prewarm")
    src = tables.synthetic_table(str(root / "t.lance"), num_rows=900, max_len=40)
    out = str(root / "out")
    materialize_shuffle(table=src, output=out, epochs=2, splits=8, executor="local")
    return out


def _cached(cache) -> list[str]:
    return sorted(os.path.relpath(p, cache) for p in glob.glob(f"{cache}/epoch-*/*.lance"))


def test_prewarm_copies_only_the_ranks_splits(materialized, tmp_path):
    cache = tmp_path / "cache"
    s = prewarm(materialized, cache=str(cache), rank=1, world_size=4)
    assert s["splits"] == [2, 3] and s["copied"] == 4 and s["cached"] == 0
    assert _cached(cache) == [split_path(e, sp) for e in (0, 1) for sp in (2, 3)]
    assert (cache / "manifest.json").read_text() == open(os.path.join(materialized, "manifest.json")).read()
    for rel in _cached(cache):
        assert lance.dataset(str(cache / rel)).to_table().equals(lance.dataset(os.path.join(materialized, rel)).to_table())


def test_prewarm_again_copies_nothing_and_repairs_damage(materialized, tmp_path, capsys):
    cache = tmp_path / "cache"
    prewarm(materialized, cache=str(cache), rank=0, world_size=2)
    assert cli_main(["prewarm", materialized, "--cache", str(cache), "--rank", "0", "--world-size", "2"]) == 0
    assert "0 copied, 8 already cached" in capsys.readouterr().out
    shutil.rmtree(cache / split_path(1, 2))
    s = prewarm(materialized, cache=str(cache), rank=0, world_size=2)
    assert s["copied"] == 1 and s["cached"] == 7


def test_prewarm_refuses_a_world_size_that_does_not_divide_the_splits(materialized, tmp_path):
    with pytest.raises(PrepError, match="world_size=3 does not divide num_splits=8"):
        prewarm(materialized, cache=str(tmp_path / "c"), rank=0, world_size=3)


def test_prewarm_refuses_a_cache_of_another_materialization(materialized, tmp_path):
    cache = tmp_path / "cache"
    prewarm(materialized, cache=str(cache), rank=0, world_size=8, epochs=[0])
    _other_materialization(cache)
    with pytest.raises(PrepError, match=f"holds materialization {OTHER}"):
        prewarm(materialized, cache=str(cache), rank=0, world_size=8)
    assert prewarm(materialized, cache=str(cache), rank=0, world_size=8, overwrite=True)["copied"] == 2
    with pytest.raises(PrepError, match=r"epochs \[7\] are not in"):
        prewarm(materialized, cache=str(cache), rank=0, world_size=8, epochs=[7])


def test_prewarm_overwrite_removes_only_what_prewarm_wrote(materialized, tmp_path):
    cache = tmp_path / "cache"
    prewarm(materialized, cache=str(cache), rank=0, world_size=8, epochs=[0])
    mine = {"notes.txt": b"keep", "epoch-00000/my-split.bin": b"mine", "_work": b"not prewarm's"}
    for rel, data in mine.items():
        (cache / rel).write_bytes(data)
    _other_materialization(cache)
    assert prewarm(materialized, cache=str(cache), rank=1, world_size=8, epochs=[1], overwrite=True)["copied"] == 1
    assert _cached(cache) == [split_path(1, 1)]
    assert {rel: (cache / rel).read_bytes() for rel in mine} == mine


def test_prewarm_refuses_a_cache_whose_marker_is_damaged_naming_it(materialized, tmp_path):
    cache = tmp_path / "cache"
    prewarm(materialized, cache=str(cache), rank=0, world_size=8, epochs=[0])
    written = json.loads((cache / CACHE_MARKER).read_text())
    assert CacheMarker.from_json(written, "w").source == materialized  # what the cache writes, its parser reads
    (cache / CACHE_MARKER).write_text(json.dumps({**written, "fingerprint": 7}))
    for overwrite in (False, True):
        with pytest.raises(PrepError, match=rf"{cache}/_prep_cache.json: cache marker: fingerprint=7 must be 16 hex "
                                            r"digits: choose an empty or new --cache"):
            prewarm(materialized, cache=str(cache), rank=0, world_size=8, overwrite=overwrite)
    assert (cache / split_path(0, 0)).is_dir()  # nothing removed


def test_prewarm_refuses_a_non_empty_cache_it_did_not_write(materialized, tmp_path):
    cache = tmp_path / "cache"
    (cache / "epoch-00000").mkdir(parents=True)
    (cache / "epoch-00000" / "split-00000.lance").write_bytes(b"mine")
    (cache / "manifest.json").write_text("{}")
    for overwrite in (False, True):
        with pytest.raises(PrepError, match=r"--cache .* is not empty and is not a prep prewarm cache"):
            prewarm(materialized, cache=str(cache), overwrite=overwrite)
    assert (cache / "epoch-00000" / "split-00000.lance").read_bytes() == b"mine"
    assert (cache / "manifest.json").read_text() == "{}"


@pytest.mark.s3
def test_materialize_verify_and_prewarm_through_s3(s3_env, s3_bucket, tmp_path):
    src = f"s3://{s3_bucket}/tables/t.lance"
    from prep.io import storage

    tables.synthetic_table(src, num_rows=500, max_len=30, storage_options=storage.lance_storage_options(src))
    out = f"s3://{s3_bucket}/shuffled"
    m = materialize_shuffle(table=src, output=out, epochs=2, splits=4, filter="length > 25")
    assert m.source.uri == src and 0 < m.num_selected_rows < 500
    assert storage.exists(f"{out}/manifest.json") and not storage.exists(f"{out}/_work")
    assert verify(out).ok
    s = prewarm(out, cache=str(tmp_path / "cache"), rank=1, world_size=2)
    assert s["copied"] == 4 and s["splits"] == [2, 3]
    assert sum(lance.dataset(str(tmp_path / "cache" / split_path(0, sp))).count_rows() for sp in (2, 3)) == sum(
        sp.num_rows for sp in m.epoch(0).splits[2:]
    )


OTHER = "0123456789abcdef"  # a fingerprint of no materialization here


def _other_materialization(cache) -> None:
    """Makes ``cache`` look like the cache of another materialization (its marker names another fingerprint)."""
    marker = CacheMarker.from_json(json.loads((cache / CACHE_MARKER).read_text()), "test")
    (cache / CACHE_MARKER).write_text(json.dumps(replace(marker, fingerprint=OTHER).to_json()))


def test_prewarm_overwrite_keeps_the_empty_folders_a_user_made(materialized, tmp_path):
    cache = tmp_path / "cache"
    prewarm(materialized, cache=str(cache), rank=0, world_size=8, epochs=[0])
    for rel in ("my-empty-folder", "epoch-00007", "epoch-00000/mine"):
        (cache / rel).mkdir()
    _other_materialization(cache)
    prewarm(materialized, cache=str(cache), rank=1, world_size=8, epochs=[1], overwrite=True)
    assert all((cache / rel).is_dir() for rel in ("my-empty-folder", "epoch-00007", "epoch-00000/mine"))
    assert _cached(cache) == [split_path(1, 1)]


def _fsync_fails_for_records(real_fsync):
    def fsync(fd: int) -> None:
        if ".json.tmp-" in os.readlink(f"/proc/self/fd/{fd}") and "/epoch-" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    return fsync


def test_prewarm_on_a_full_disk_leaves_no_temp_files_and_the_rerun_completes(materialized, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setattr(os, "fsync", _fsync_fails_for_records(os.fsync))
    with pytest.raises(OSError, match="No space left"):
        prewarm(materialized, cache=str(cache), rank=0, world_size=8, threads=1)
    assert not glob.glob(f"{cache}/**/*.tmp-*", recursive=True)
    monkeypatch.undo()
    assert prewarm(materialized, cache=str(cache), rank=0, world_size=8)["copied"] == 2


def test_what_a_killed_prewarm_left_is_removed_by_the_next_run(materialized, tmp_path):
    cache = tmp_path / "cache"
    prewarm(materialized, cache=str(cache), rank=0, world_size=8)
    left = [cache / "epoch-00001" / "split-00005.copy.json.tmp-0123456789ab", cache / "manifest.json.tmp-0123456789ab",
            cache / "epoch-00000" / "split-00000.lance.tmp-0123456789ab"]
    for path in left:
        path.write_text("{")
    (cache / "notes.tmp-1").write_text("mine")
    assert prewarm(materialized, cache=str(cache), rank=0, world_size=8)["cached"] == 2  # another rank's leftovers too
    assert not any(path.exists() for path in left) and (cache / "notes.tmp-1").read_text() == "mine"


def test_reading_with_the_cache_of_another_materialization_says_what_to_do(materialized, tmp_path, capsys):
    cache = tmp_path / "cache"
    prewarm(materialized, cache=str(cache), rank=0, world_size=8, epochs=[0])
    _other_materialization(cache)
    code = cli_main(["read", materialized, "--global-batch-size", "8", "--max-steps", "1", "--cache-dir", str(cache)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err, err
    assert "use another cache directory, or replace it with `prep prewarm" in err and f"--cache {cache} --overwrite`" in err


def test_overwrite_never_replaces_a_cache_another_process_uses(materialized, tmp_path):
    from prep.cache.store import SplitCache

    cache = tmp_path / "cache"
    prewarm(materialized, cache=str(cache), rank=0, world_size=8, epochs=[0])
    _other_materialization(cache)
    before = _cached(cache)
    user = SplitCache(str(cache), source=materialized + "-x", manifest=_manifest_of(cache))
    try:
        with pytest.raises(PrepError, match=rf"and it is in use by prep prewarm \(host \S+, pid {os.getpid()}, started "):
            prewarm(materialized, cache=str(cache), rank=0, world_size=8, overwrite=True)
        assert _cached(cache) == before
    finally:
        user.close()
    assert prewarm(materialized, cache=str(cache), rank=0, world_size=8, overwrite=True)["copied"] == 2


def _manifest_of(cache):
    """The manifest of the materialization the tampered marker names (the one a user of that cache would read)."""
    from prep.io.materialized import read_manifest

    marker = json.loads((cache / "_prep_cache.json").read_text())
    return replace(read_manifest(str(cache)), fingerprint=marker["fingerprint"])


def test_a_prewarm_rerun_refetches_exactly_the_missing_and_damaged_copies(materialized, tmp_path):
    cache = tmp_path / "cache"
    prewarm(materialized, cache=str(cache), rank=0, world_size=2)
    gone, short, flipped = (sorted(glob.glob(f"{cache}/{split_path(e, s)}/data/*.lance"))[0] for e, s in ((0, 1), (1, 2), (1, 3)))
    os.remove(gone)
    with open(short, "r+b") as f:
        f.truncate(10)
    data = bytearray(open(flipped, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(flipped, "wb").write(bytes(data))
    s = prewarm(materialized, cache=str(cache), rank=0, world_size=2)
    assert (s["copied"], s["cached"]) == (3, 5)
    from prep.cache.store import SplitCache

    store = SplitCache(str(cache), source=materialized)
    assert len(store.cached()) == 8 and all(store.valid(k) for k in store.cached())
    store.close()


def test_a_prewarm_that_finds_the_splits_copied_by_another_meanwhile_does_not_report_them_copied(materialized, tmp_path,
                                                                                                  monkeypatch):
    """Issue 31 #10: two prewarms racing on one cache; the second looked before the first copied, then found the copies
    there and reported them "copied". The race is set up by having the second look at an empty cache."""
    import prep.cache.prewarm as prewarm_module

    cache = str(tmp_path / "cache")
    first = prewarm(materialized, cache=cache, rank=0, world_size=2)
    assert (first["copied"], first["cached"]) == (8, 0)
    monkeypatch.setattr(prewarm_module, "_cached", lambda store, key: False)  # as it looked before the first copied
    second = prewarm(materialized, cache=cache, rank=0, world_size=2)
    assert (second["copied"], second["cached"], second["bytes"]) == (0, 8, 0)
