"""Compressed text inputs (.gz, .zst, .bz2) are read as their decompressed text, one chunk per file."""

from __future__ import annotations

import bz2
import gzip

import pytest
import zstandard

from prep.errors import PrepError
from prep.prepare.text.readers import read_chunk
from prep.prepare.text.sources import list_sources, plan_chunks

CODECS = {".gz": gzip.compress, ".zst": lambda b: zstandard.ZstdCompressor().compress(b), ".bz2": bz2.compress}


@pytest.fixture
def lines(shared_data) -> bytes:
    with open(shared_data / "gsm8k" / "train.jsonl", "rb") as f:
        return b"".join(next(f) for _ in range(30))


def _rows(path: str, **kw):
    [src] = list_sources([path], **kw)
    chunks = plan_chunks([src], chunk_bytes=4096)
    out = [read_chunk(c) for c in chunks]
    return src, chunks, [r for rec in out for r in rec.rows], [p for rec in out for p in rec.positions.tolist()]


@pytest.mark.parametrize("suffix", sorted(CODECS))
def test_compressed_jsonl_reads_like_the_plain_file(lines, tmp_path, suffix):
    (tmp_path / "plain.jsonl").write_bytes(lines)
    (tmp_path / f"packed.jsonl{suffix}").write_bytes(CODECS[suffix](lines))
    _, plain_chunks, plain_rows, plain_pos = _rows(str(tmp_path / "plain.jsonl"))
    src, chunks, rows, pos = _rows(str(tmp_path / f"packed.jsonl{suffix}"))
    assert src.format == "jsonl" and src.compression is not None
    assert len(plain_chunks) > 1 and len(chunks) == 1  # a compressed stream is one chunk
    assert rows == plain_rows and pos == plain_pos and len(rows) == 30


def test_a_folder_mixes_plain_and_compressed_text(lines, tmp_path):
    text = b"first paragraph\n\nsecond one\n"
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(text))
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "a.txt").write_bytes(text)
    (tmp_path / "b.jsonl.zst").write_bytes(CODECS[".zst"](lines))
    (tmp_path / "c.parquet.gz").write_bytes(b"not an input: Parquet compresses itself")
    found = {s.key: (s.format, s.compression) for s in list_sources([str(tmp_path)])}
    assert found == {"a.txt.gz": ("text", "gzip"), "b.jsonl.zst": ("jsonl", "zstd"), "plain/a.txt": ("text", None)}
    assert _rows(str(tmp_path / "a.txt.gz"))[2] == _rows(str(tmp_path / "plain" / "a.txt"))[2] == [
        "first paragraph", "second one\n"]


def test_a_broken_compressed_file_is_an_error_naming_it(lines, tmp_path):
    bad = tmp_path / "broken.jsonl.gz"
    bad.write_bytes(gzip.compress(lines)[:-40])
    [src] = list_sources([str(bad)])
    with pytest.raises(PrepError, match=r"broken\.jsonl\.gz: cannot decompress \(gzip\)"):
        read_chunk(plan_chunks([src], 4096)[0])
