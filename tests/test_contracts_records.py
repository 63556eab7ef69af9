"""The leaf records of a table's metadata (counts, the image keys) and of its file index: each
round-trips through its one parser, and refuses an unknown field or a wrong type in one line
naming the file and the field."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prep.contracts.counts import REQUIRED_COUNTS, Counts
from prep.contracts.file_index import IndexRow, index_path
from prep.contracts.images import DecoderInfo, EncodedInfo, ImageTableInfo
from prep.contracts.source import SourceEntry
from prep.contracts.table import TABLE_FORMAT, TableMetadata
from prep.errors import PrepError
from prep.io.file_index import read_index, write_index

TEXT = {"format": TABLE_FORMAT, "prep_version": "0.1.0", "kind": "sft", "tokenizer": {"name": "t", "hash": "h"},
        "counts": {"rows_read": 3, "rows_accepted": 3, "rows_rejected": 0, "rows_written": 3, "files_rejected": 0}}
IMAGES = {"format": TABLE_FORMAT, "prep_version": "0.1.0", "kind": "images", "labels": ["ants", "bees"],
          "source_kind": "imagefolder", "encoded": {"format": "webp", "quality": 90, "shape": [8, 8, 3]},
          "decoder": {"library": "torchvision 0.24.0", "fallback": "Pillow", "formats": {"JPEG": 2}}}


def test_counts_round_trip_and_write_zero_only_for_the_five_every_table_has():
    counts = Counts(rows_read=5, rows_accepted=4, rows_rejected=1, rows_written=4, tokens=90, formats={"PNG": 1, "GIF": 3})
    raw = counts.to_json()
    assert raw == {"rows_read": 5, "rows_accepted": 4, "rows_rejected": 1, "rows_written": 4, "files_rejected": 0,
                   "tokens": 90, "format:GIF": 3, "format:PNG": 1}
    assert Counts.from_json(raw, "t:") == counts and set(REQUIRED_COUNTS) <= set(Counts().to_json())


def test_counts_add_and_take_away_field_by_field():
    a = Counts(rows_read=5, rows_written=4, tokens=9, formats={"PNG": 1})
    b = Counts(rows_read=2, rows_written=2, tokens=4, formats={"PNG": 1, "GIF": 2})
    assert a + b == Counts(rows_read=7, rows_written=6, tokens=13, formats={"GIF": 2, "PNG": 2})
    assert (a + b).minus(b) == a
    with pytest.raises(PrepError, match=r"counts.rows_read would be -8"):
        b.minus(a + a)


@pytest.mark.parametrize("raw, named", [
    ({"rows_red": 3}, "t: counts.rows_red=3 is not a count prep keeps"),
    ({"rows_read": "3"}, "t: counts.rows_read='3' must be an integer >= 0"),
    ({"rows_read": True}, "t: counts.rows_read=True must be an integer >= 0"),
    ({"format:PNG": -1}, "t: counts.format:PNG=-1 must be an integer >= 0"),
    ({"formats": {"PNG": 1}}, "t: counts.formats="),  # the formats are flat keys on disk
    ([3], "t: counts=[3] must be an object"),
])
def test_bad_counts_are_one_line_naming_the_field(raw, named):
    with pytest.raises(PrepError) as err:
        Counts.from_json(raw, "t:")
    assert str(err.value).startswith(named) and "\n" not in str(err.value)


def test_a_table_s_counts_are_typed_and_a_key_prep_does_not_write_is_refused():
    meta = TableMetadata.from_json(TEXT, "t.lance")
    assert meta.counts.rows_written == 3 and meta.counts.tokens == 0 and meta.images is None
    assert TableMetadata.from_json(meta.to_json(), "t.lance") == meta
    with pytest.raises(PrepError, match=r"^t.lance: prep table metadata colour='red' is not a field prep writes"):
        TableMetadata.from_json({**TEXT, "colour": "red"}, "t.lance")
    with pytest.raises(PrepError, match=r"^t.lance: prep table metadata counts.tokens=-1 must be an integer >= 0"):
        TableMetadata.from_json({**TEXT, "counts": {"tokens": -1}}, "t.lance")


def test_the_image_keys_round_trip_as_one_record():
    meta = TableMetadata.from_json(IMAGES, "i.lance")
    assert meta.images == ImageTableInfo(labels=("ants", "bees"), source_kind="imagefolder",
                                         encoded=EncodedInfo(format="webp", quality=90, shape=(8, 8, 3)),
                                         decoder=DecoderInfo(library="torchvision 0.24.0", fallback="Pillow", formats={"JPEG": 2}))
    again = meta.to_json()
    assert {k: again[k] for k in IMAGES} == IMAGES and TableMetadata.from_json(again, "i.lance") == meta
    # a table written by a Ray Data pipeline records no formats; one with pixels only, no encoded column
    plain = TableMetadata.from_json({**IMAGES, "encoded": None, "decoder": {"library": "x", "fallback": "Pillow"}}, "i.lance")
    assert plain.images is not None and plain.images.encoded is None and plain.images.decoder.formats is None
    assert plain.to_json()["decoder"] == {"library": "x", "fallback": "Pillow"} and plain.to_json()["encoded"] is None


@pytest.mark.parametrize("change, named", [
    ({"labels": "ants"}, "labels='ants' must be a list of class names"),
    ({"labels": ["ants", 3]}, "labels=['ants', 3] must be a list of class names"),
    ({"source_kind": 3}, "source_kind=3 must be a string"),
    ({"encoded": {"format": "webp", "quality": 0, "shape": [8, 8, 3]}}, "encoded.quality=0 must be an integer 1-100"),
    ({"encoded": {"format": "webp", "quality": 90, "shape": [8, 8]}}, "encoded.shape=[8, 8] must be a shape [H, W, C]"),
    ({"encoded": {"format": "webp", "quality": 90, "shape": [8, 8, 3], "lossy": True}}, "encoded.lossy=True is not a field prep writes"),
    ({"decoder": {"library": "x", "fallback": "Pillow", "formats": {"PNG": "1"}}}, "decoder.formats={'PNG': '1'} must be an object of integers"),
    ({"decoder": {"library": 1, "fallback": "Pillow"}}, "decoder.library=1 must be a string"),
    ({"image": {"shape": [8, 8, 3], "layout": "CHW"}}, "image={'shape': [8, 8, 3], 'layout': 'CHW'} must have layout HWC"),
])
def test_a_bad_image_key_is_one_line_naming_the_table_and_the_field(change, named):
    with pytest.raises(PrepError) as err:
        TableMetadata.from_json({**IMAGES, **change}, "i.lance")
    assert str(err.value).startswith(f"i.lance: prep table metadata {named}") and "\n" not in str(err.value)


def test_a_file_index_round_trips_its_rows(tmp_path):
    files = [SourceEntry(uri="/d/a.jpg", key="a.jpg", size=3, mtime="1.5", stamp="7:1.5", digest="sha256:ab"),
             SourceEntry(uri="s3://b/c.jpg", key="c.jpg", size=4, mtime="2.0", etag="9e")]
    rel = write_index(str(tmp_path), 1, files, None)
    assert rel == index_path(1)
    held = read_index(str(tmp_path), [rel], None)
    assert held == {f.uri: IndexRow.of(f) for f in files} and [r.entry() for r in held.values()] == files
    write_index(str(tmp_path), 2, files[:1], None, removed=["s3://b/c.jpg"])  # a later step removed c
    assert list(read_index(str(tmp_path), [rel, index_path(2)], None)) == ["/d/a.jpg"]


def test_an_index_from_before_stamps_reads_and_a_wrong_column_is_refused(tmp_path):
    (tmp_path / "_prep_files").mkdir()
    old = pa.table({"uri": ["/d/a.jpg"], "key": ["a.jpg"], "size": pa.array([3], pa.int64()), "mtime": ["1.5"], "etag": [""]})
    pq.write_table(old, tmp_path / index_path(1))
    assert read_index(str(tmp_path), [index_path(1)], None) == {"/d/a.jpg": IndexRow(uri="/d/a.jpg", key="a.jpg", size=3, mtime="1.5")}
    pq.write_table(old.set_column(2, "size", pa.array(["3"])), tmp_path / index_path(2))
    with pytest.raises(PrepError, match=r"v2.parquet: file index column size is string, not int64"):
        read_index(str(tmp_path), [index_path(2)], None)
    pq.write_table(old.append_column("colour", pa.array(["red"])), tmp_path / index_path(3))
    with pytest.raises(PrepError, match=r"v3.parquet: file index column colour is not one prep writes"):
        read_index(str(tmp_path), [index_path(3)], None)
    pq.write_table(old.drop_columns(["key"]), tmp_path / index_path(4))
    with pytest.raises(PrepError, match=r"v4.parquet: file index column key is missing"):
        read_index(str(tmp_path), [index_path(4)], None)


@pytest.mark.parametrize("change, named", [
    ({"tokenizer": {"name": "t", "hash": "h", "vocab": 3}}, "tokenizer.vocab=3 is not a field prep writes"),
    ({"history": [{"version": 1, "rows_added": 3, "rows_moved": 1}]}, "history.rows_moved=1 is not a field prep writes"),
])
def test_a_tokenizer_or_step_field_prep_does_not_write_is_refused(change, named):
    with pytest.raises(PrepError) as err:
        TableMetadata.from_json({**TEXT, **change}, "t.lance")
    assert str(err.value).startswith(f"t.lance: prep table metadata {named}")


def test_tables_written_before_the_records_still_read():
    """An image table from before ``source_kind``/``decoder`` were written, and a source whose counts hold formats."""
    old = {"format": TABLE_FORMAT, "prep_version": "0.0.9", "kind": "images", "labels": ["ants"],
           "image": {"shape": [8, 8, 3], "layout": "HWC", "dtype": "uint8"}, "counts": {"rows_written": 2},
           "sources": [{"uri": "/d/a.tar", "key": "a.tar", "size": 9, "mtime": "1.0",
                        "counts": {"rows_read": 2, "format:JPEG": 2, "decoded_with_pil": 0}}]}
    meta = TableMetadata.from_json(old, "old.lance")
    assert meta.images == ImageTableInfo(labels=("ants",)) and meta.counts == Counts(rows_written=2)
    assert meta.sources[0].counts == Counts(rows_read=2, formats={"JPEG": 2})
    assert meta.history[0].rows_added == 2  # no history: one step made all of it
