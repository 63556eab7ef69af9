"""The table metadata contract: what both prepare jobs write is what the reader, inspect,
materialize and mixtures read, through one parser that refuses what is impossible."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import lance
import pytest

from conftest import GSM8K
from prep.contracts.table import METADATA_KEY, TABLE_FORMAT, RejectsMetadata, TableMetadata, read_metadata, read_table_metadata
from prep.errors import PrepError
from prep.materialize.mixture.sources import open_sources
from prep.plan.spec import MixtureSource, MixtureSpec
from prep.prepare.images.config import ImagesConfig
from prep.prepare.images.job import run_decode_images
from prep.prepare.text.pretokenize import PretokenizeConfig, run_pretokenize
from prep.reader.spec import spec_from_metadata
from prep.runtime.config import load_config
from prep.tools.inspection import inspect_path
from test_images import photos

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def text_table(tmp_path_factory, shared_data, tokenizer_dir) -> str:
    root = tmp_path_factory.mktemp("text")
    (root / "in.jsonl").write_text("".join(GSM8K.read_text().splitlines(keepends=True)[:30]))
    out = str(root / "t.lance")
    run_pretokenize(load_config(PretokenizeConfig, REPO / "configs" / "gsm8k-sft.yaml", input=str(root / "in.jsonl"),
                                output=out, tokenizer=tokenizer_dir, executor="local"))
    return out


@pytest.fixture(scope="module")
def image_table(tmp_path_factory, shared_data) -> str:
    root = tmp_path_factory.mktemp("img")
    for p in photos(4):
        (root / "in" / p.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(p, root / "in" / p.parent.name / p.name)
    out = str(root / "i.lance")
    run_decode_images(load_config(ImagesConfig, REPO / "configs" / "imagefolder.yaml", input=str(root / "in"),
                                  output=out, executor="local"))
    return out


def test_text_metadata_round_trips_into_every_reader(text_table):
    ds = lance.dataset(text_table)
    meta = read_table_metadata(ds, text_table)
    assert meta.format == TABLE_FORMAT and meta.kind == "sft" and meta.tokenizer is not None
    assert meta.counts.rows_read == 30 and meta.tokenizer.eos_id == 2
    assert TableMetadata.from_json(meta.to_json(), "again") == meta  # the JSON form is lossless
    spec = spec_from_metadata(meta)
    assert spec.kind == "sft" and spec.pad_id == meta.tokenizer.pad_or_eos
    report = inspect_path(text_table)
    assert report["table_kind"] == "sft" and report["tokenizer"]["name"] == meta.tokenizer.name
    mix = MixtureSpec(sources=(MixtureSource(table=text_table, weight=1.0),), weight_by="rows", global_batch=1)
    [opened] = open_sources(mix, None)
    assert opened.metadata == meta
    rejects = read_metadata(lance.dataset(meta.rejects_uri).schema.metadata, meta.rejects_uri)
    assert rejects == RejectsMetadata(of=text_table)


def test_image_metadata_round_trips_into_every_reader(image_table):
    meta = read_table_metadata(lance.dataset(image_table), image_table)
    assert meta.kind == "images" and meta.image is not None and meta.image.shape == (224, 224, 3)
    assert meta.images is not None and meta.images.labels == ("ants", "bees") and meta.tokenizer is None
    assert TableMetadata.from_json(meta.to_json(), "again") == meta
    assert spec_from_metadata(meta).image_shape == (224, 224, 3)
    assert inspect_path(image_table)["image"]["shape"] == [224, 224, 3]


@pytest.mark.parametrize("change, named", [
    ({"kind": "audio"}, "kind='audio'"),
    ({"tokenizer": None}, "names no tokenizer"),
    ({"tokenizer": {"name": "t", "vocab_size": 100, "pad_id": 100}}, "tokenizer.pad_id=100 must be a token id: an integer >= 0 and < vocab_size 100"),
    ({"tokenizer": {"name": "t", "pad_id": -5}}, "tokenizer.pad_id=-5"),
    ({"counts": {"rows_read": "7"}}, "counts.rows_read='7'"),
    ({"format": "prep.table/2"}, "upgrade prep"),
])
def test_impossible_metadata_is_one_error_naming_the_field(text_table, change, named):
    raw = {**read_table_metadata(lance.dataset(text_table), text_table).to_json(), **change}
    with pytest.raises(PrepError, match=named.replace("(", r"\(").replace("[", r"\[")) as err:
        read_metadata({METADATA_KEY: json.dumps(raw).encode()}, "x.lance")
    assert "x.lance" in str(err.value) and "\n" not in str(err.value)


def test_a_foreign_table_has_no_metadata_and_a_rejects_table_is_not_a_prepared_table(text_table):
    assert read_metadata({b"other": b"{}"}, "x") is None
    meta = read_table_metadata(lance.dataset(text_table), text_table)
    with pytest.raises(PrepError, match="is a rejects table"):
        read_table_metadata(lance.dataset(meta.rejects_uri), meta.rejects_uri)


SOURCE_ENTRIES = [
    {"uri": "/d/a.jsonl", "key": "a.jsonl", "size": 10, "mtime": "1796290857.7", "stamp": "5578811:1796290857.7",
     "digest": "sha256:ab", "counts": {"rows_read": 3, "rows_accepted": 2, "rows_rejected": 1, "rows_written": 2,
     "files_rejected": 0, "tokens": 17, "format:JPEG": 2}, "data_files": ["x.lance"], "reject_files": []},
    {"uri": "s3://b/in/s0.tar", "key": "b/in/s0.tar", "size": 4, "mtime": "2026-01-01 00:00:00+00:00", "etag": "9e1"},
    {"uri": "/d/m.csv", "key": "m.csv", "size": 5, "mtime": "1.0", "rows": 7},
    {"uri": "/d/photos", "files": 245, "bytes": 1234},
    {"uri": "/d/old.jsonl", "size": 3, "mtime": "2.0"},  # a table made before --append: no id key
]


@pytest.mark.parametrize("raw", SOURCE_ENTRIES)
def test_a_source_entry_round_trips_through_its_parser(raw):
    from prep.contracts.source import SourceEntry

    entry = SourceEntry.from_json(raw, "t.lance")
    assert entry.to_json() == raw and SourceEntry.from_json(entry.to_json(), "t.lance") == entry


@pytest.mark.parametrize("raw,message", [
    ({"size": 3}, "must be an object with a uri"),
    ({"uri": "/a", "size": -1}, r"entry /a: size=-1 must be an integer >= 0"),
    ({"uri": "/a", "counts": {"rows_read": "3"}}, r"entry /a: counts.rows_read='3' must be an integer >= 0"),
    ({"uri": "/a", "counts": {"rows_red": 3}}, r"entry /a: counts.rows_red=3 is not a count prep keeps"),
    ({"uri": "/a", "data_files": "x.lance"}, r"data_files='x.lance' must be a list of paths"),
    ({"uri": "/a", "sizes": 3}, r"sizes=3 must be one of the known fields"),
])
def test_a_bad_source_entry_is_one_line_naming_the_table_and_the_field(raw, message):
    from prep.contracts.source import SourceEntry

    with pytest.raises(PrepError, match=message):
        SourceEntry.from_json(raw, "t.lance")
