"""Reading one chunk of a text input (:mod:`prep.prepare.text.sources` lists and cuts them) into rows.

Readers never raise on a bad row: whatever a line raises while it is parsed (malformed
JSON, nesting deeper than Python's parser goes, invalid UTF-8...) becomes a
:class:`~prep.prepare.rejects.Reject` naming the file and line. Integers longer than
Python converts by default (4,300 digits) are read as ``decimal.Decimal``. A file with
no rows at all (0 bytes, an empty ``.gz``, only blank lines, a Parquet file without
rows, an empty JSON array) is a file-level reject, ``empty file``. A file whose size or
mtime differs after reading from what was listed is an error naming it (it changed
while the job read it).
"""

from __future__ import annotations

import io
import json
import re
from decimal import Decimal
from typing import Any

import numpy as np

from prep.io import storage
from prep.errors import PrepError, one_line
from prep.prepare import faults
from prep.prepare.listing import check_unchanged, dangling_link
from prep.prepare.rejects import RAW_PREFIX_CHARS, Reject
from prep.prepare.text.sources import Chunk, Records, TextUnit

__all__ = ["read_chunk"]

_READ_MORE = 1 << 16


def _read_line_range(chunk: Chunk, s3: storage.S3Options | None) -> tuple[bytes, int]:
    """Bytes of the lines whose first byte is in ``[start, end)``, and the offset of the first
    (a compressed file is one chunk: all its decompressed lines)."""
    if chunk.source.compression is not None:
        return _read_whole(chunk, s3), 0
    fs, path = storage.filesystem(chunk.source.uri, s3)
    with fs.open(path, "rb") as f:
        begin = max(chunk.start - 1, 0)
        f.seek(begin)
        buf = f.read(chunk.end - begin)
        offset = begin
        if chunk.start > 0:
            nl = buf.find(b"\n")
            if nl < 0:
                return b"", chunk.end
            buf, offset = buf[nl + 1 :], begin + nl + 1
        if chunk.end < chunk.source.size and not buf.endswith(b"\n"):
            tail = bytearray()
            while True:
                more = f.read(_READ_MORE)
                if not more:
                    break
                nl = more.find(b"\n")
                if nl >= 0:
                    tail += more[: nl + 1]
                    break
                tail += more
            buf += bytes(tail)
    return buf, offset


def _count_lines_before(chunk: Chunk, offset: int, s3: storage.S3Options | None, universal: bool) -> int:
    """Line number (0-based) of byte ``offset``; read only when a reject needs a line number.
    ``universal``: a lone ``\\r`` ends a line too (text lines), as in :func:`_split_lines`."""
    if offset == 0:
        return 0
    fs, path = storage.filesystem(chunk.source.uri, s3)
    count, left, after_cr = 0, offset, False
    with fs.open(path, "rb") as f:
        while left > 0:
            block = f.read(min(left, 1 << 24))
            if not block:
                break
            count += block.count(b"\n")
            if universal:  # each \r not followed by \n (a \r\n cut by the block boundary counts once)
                count += block.count(b"\r") - block.count(b"\r\n") - (after_cr and block[:1] == b"\n")
                after_cr = block.endswith(b"\r")
            left -= len(block)
    return count


_LINE_END = re.compile(rb"\r\n?|\n")


def _split_lines(buf: bytes, offset: int, universal: bool = False) -> tuple[list[bytes], np.ndarray]:
    """The lines of ``buf`` and their byte offsets. JSON lines end at ``\\n`` (a ``\\r`` before it is JSON
    whitespace); ``universal`` text lines end at ``\\r\\n``, ``\\r`` or ``\\n`` (Python's text mode), endings left out."""
    if universal and b"\r" in buf:
        lines, starts, at = [], [], 0
        for m in _LINE_END.finditer(buf):
            lines.append(buf[at:m.start()])
            starts.append(offset + at)
            at = m.end()
        if at < len(buf):
            lines.append(buf[at:])
            starts.append(offset + at)
        return lines, np.asarray(starts, np.int64)
    lines = buf.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    lengths = np.fromiter((len(x) + 1 for x in lines), dtype=np.int64, count=len(lines))
    starts = offset + np.concatenate(([0], np.cumsum(lengths)[:-1])) if len(lines) else np.zeros(0, np.int64)
    return lines, starts


def _read_jsonl(chunk: Chunk, s3: storage.S3Options | None, as_text: bool) -> Records:
    buf, offset = _read_line_range(chunk, s3)
    lines, starts = _split_lines(buf, offset, universal=as_text)
    rows: list[Any] = []
    keep: list[int] = []
    bad: list[tuple[int, str, bytes]] = []
    blank = 0
    armed = faults.active()
    for i, line in enumerate(lines):
        if not line.strip():
            blank += 1
            continue
        try:
            if armed:
                faults.maybe_raise("parse", line.decode("utf-8", "replace"))
            if as_text:  # utf-8-sig: a byte-order mark opening the file is not text
                value: Any = line.decode("utf-8-sig" if i == 0 and offset == 0 else "utf-8")
            else:
                value = _json_line(line)
                if not isinstance(value, dict):
                    bad.append((i, f"expected a JSON object, got {type(value).__name__}", line))
                    continue
        except UnicodeDecodeError as exc:
            bad.append((i, f"invalid UTF-8 at byte {exc.start} of the line", line))
            continue
        except json.JSONDecodeError as exc:
            bad.append((i, f"malformed JSON at column {exc.colno}: {exc.msg}", line))
            continue
        except Exception as exc:  # whatever one line raises (nesting too deep, a bug) costs that line only
            bad.append((i, f"cannot parse: {type(exc).__name__}: {one_line(exc, limit=200)}", line))
            continue
        rows.append(value)
        keep.append(i)
    base: int | None = None

    def line_no(i: int) -> str:
        nonlocal base
        if base is None:
            base = _count_lines_before(chunk, offset, s3, universal=as_text) + 1
        return f"line {base + i}"

    rejects = [Reject(chunk.source.uri, line_no(i), reason, raw[: 4 * RAW_PREFIX_CHARS].decode("utf-8", "replace")) for i, reason, raw in bad]
    recs = Records(rows, starts[keep] if keep else np.zeros(0, np.int64), rejects, blank)
    recs.where = _LazyLabels(keep, line_no)  # type: ignore[assignment]
    return recs


def _big_int(digits: str) -> int | Decimal:
    return int(digits) if len(digits) <= 4300 else Decimal(digits)


def _json_line(line: bytes) -> Any:
    """One JSON value; integers past Python's default conversion limit (4,300 digits) as Decimal.

    The limit is a guard against slow conversions, not a JSON rule, so such a row is read,
    not rejected; only lines that hit it pay for the second parse.
    """
    try:
        return json.loads(line)
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError) or "integer string conversion" not in str(exc):
            raise
        return json.loads(line, parse_int=_big_int)


class _LazyLabels:
    """``where[i]`` -> ``line N``, counting lines before the chunk only if ever asked."""

    def __init__(self, keep: list[int], line_no: Any) -> None:
        self._keep, self._line_no = keep, line_no

    def __getitem__(self, i: int) -> str:
        return self._line_no(self._keep[i])


def _read_whole(chunk: Chunk, s3: storage.S3Options | None) -> bytes:
    """The file's bytes, decompressed; a broken stream is an error naming the file."""
    fs, path = storage.filesystem(chunk.source.uri, s3)
    try:
        with fs.open(path, "rb", compression=chunk.source.compression) as f:
            return f.read()
    except (OSError, EOFError, ValueError) as exc:
        if chunk.source.compression is None:
            raise
        raise PrepError(f"{chunk.source.uri}: cannot decompress ({chunk.source.compression}): {one_line(exc)}") from None


def _read_json_array(chunk: Chunk, s3: storage.S3Options | None) -> Records:
    data = _read_whole(chunk, s3)
    if not data.lstrip()[:1] == b"[":  # a .json file holding JSON lines
        return _read_jsonl(chunk, s3, as_text=False)
    try:
        values = _json_line(data)
    except UnicodeDecodeError as exc:
        raise PrepError(f"{chunk.source.uri}: invalid UTF-8 at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise PrepError(f"{chunk.source.uri}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except Exception as exc:  # one JSON document: what it raises is about the whole file
        raise PrepError(f"{chunk.source.uri}: cannot parse the JSON array ({type(exc).__name__}: {one_line(exc, limit=200)})") from None
    rows, keep, rejects = [], [], []
    for i, v in enumerate(values):
        if isinstance(v, dict):
            rows.append(v)
            keep.append(i)
        else:
            rejects.append(Reject(chunk.source.uri, f"element {i}", f"expected a JSON object, got {type(v).__name__}", repr(v)[:200]))
    recs = Records(rows, np.asarray(keep, np.int64), rejects)
    recs.where = [f"element {i}" for i in keep]
    return recs


def _read_csv(chunk: Chunk, s3: storage.S3Options | None) -> Records:
    import pyarrow.csv as pacsv

    rejects: list[Reject] = []
    skipped: set[int] = set()

    def on_invalid(row: Any) -> str:  # row.number counts records, the header as 1 (known when parsed on one thread)
        skipped.add(row.number - 1)
        rejects.append(Reject(chunk.source.uri, f"data row {row.number - 1}", f"CSV: expected {row.expected_columns} columns, got {row.actual_columns}", row.text or ""))
        return "skip"

    try:
        table = pacsv.read_csv(io.BytesIO(_read_whole(chunk, s3)), read_options=pacsv.ReadOptions(use_threads=False),
                               parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid), convert_options=pacsv.ConvertOptions(strings_can_be_null=False))
    except Exception as exc:
        raise PrepError(f"{chunk.source.uri}: cannot read CSV: {str(exc).splitlines()[0]}") from None
    rows = table.to_pylist()
    recs = Records(rows, np.arange(len(rows), dtype=np.int64), rejects)
    recs.where = [f"data row {n}" for n in _numbers_without(skipped, len(rows))]
    return recs


def _numbers_without(skipped: set[int], count: int) -> list[int]:
    """The first ``count`` of 1, 2, 3... that are not in ``skipped`` (the records a CSV reader kept).

    >>> _numbers_without({2, 4}, 3)
    [1, 3, 5]
    """
    out, n = [], 0
    while len(out) < count:
        n += 1
        if n not in skipped:
            out.append(n)
    return out


def _read_parquet(chunk: Chunk, s3: storage.S3Options | None) -> Records:
    import pyarrow.parquet as pq

    fs, path = storage.filesystem(chunk.source.uri, s3)
    if chunk.start == chunk.end:
        return Records([], np.zeros(0, np.int64))
    with fs.open(path, "rb") as f:
        table = pq.ParquetFile(f).read_row_groups(list(range(chunk.start, chunk.end)))
    rows = table.to_pylist()
    positions = np.arange(chunk.first_row, chunk.first_row + len(rows), dtype=np.int64)
    recs = Records(rows, positions)
    recs.where = [f"row {p}" for p in positions]
    return recs


# A line ending (\r\n, \r or \n) and one or more blank lines (spaces and tabs only) after it.
_EOL = rb"(?:\r\n|\r(?!\n)|\n)"  # one line ending: a \r\n is never read as two
_PARAGRAPH = re.compile(_EOL + rb"(?:[ \t]*" + _EOL + rb")+")


def _lf(text: str) -> str:
    """``text`` with its line endings written ``\\n`` (a text without ``\\r`` is returned as it is)."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _read_text_blocks(chunk: Chunk, s3: storage.S3Options | None, unit: TextUnit) -> Records:
    data = _read_whole(chunk, s3)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Records([], np.zeros(0, np.int64), [Reject(chunk.source.uri, f"byte {exc.start}", "invalid UTF-8", data[max(0, exc.start - 40): exc.start + 40].decode("utf-8", "replace"))])
    if unit == "file":
        pieces = [(0, data)] if data.strip() else []
    else:
        pieces, pos = [], 0
        for m in _PARAGRAPH.finditer(data):
            pieces.append((pos, data[pos:m.start()]))
            pos = m.end()
        pieces.append((pos, data[pos:]))
        pieces = [(p, t) for p, t in pieces if t.strip()]
    rows = [_lf(t.decode("utf-8-sig" if p == 0 else "utf-8")) for p, t in pieces]  # a byte-order mark is not text
    positions = np.asarray([p for p, _ in pieces], np.int64)
    recs = Records(rows, positions)
    recs.where = [f"byte {p}" for p in positions]
    return recs


def read_chunk(chunk: Chunk, s3: storage.S3Options | None = None, text_unit: TextUnit = "paragraph") -> Records:
    """Reads one chunk into rows (dicts, or str for text), rejecting what cannot be parsed.

    Raises:
        PrepError: the file cannot be read, or it changed (size, mtime) since it was listed.
    """
    if chunk.source.size == 0:
        return Records([], np.zeros(0, np.int64), [Reject(chunk.source.uri, "file", dangling_link(chunk.source.uri) or "empty file")])
    try:
        records = _read(chunk, s3, text_unit)
    except OSError as exc:
        if not (storage.is_remote(chunk.source.uri) and _expired(exc)):
            raise
        raise PrepError(f"{chunk.source.uri} changed while the job read it (ETag {chunk.source.etag} is gone); "
                        "rerun once it is no longer being written") from None
    check_unchanged(chunk.source, s3)
    if chunk.whole_file and not records.rows and not records.rejects:
        records.rejects.append(Reject(chunk.source.uri, "file", f"empty file ({_no_rows(chunk, records)})"))
    return records


def _expired(exc: OSError) -> bool:
    """s3fs's error for an object whose ETag changed after it was listed or opened."""
    from s3fs.utils import FileExpired  # only s3:// reaches here: s3fs is loaded already

    return isinstance(exc, FileExpired)


def _no_rows(chunk: Chunk, records: Records) -> str:
    if records.blank_lines:
        return f"{records.blank_lines:,} blank lines, no rows"
    if chunk.source.compression is not None:
        return f"{chunk.source.compression}: no rows once decompressed"
    return "no rows"


def _read(chunk: Chunk, s3: storage.S3Options | None, text_unit: TextUnit) -> Records:
    fmt = chunk.source.format
    if fmt == "jsonl":
        return _read_jsonl(chunk, s3, as_text=False)
    if fmt == "json":
        return _read_json_array(chunk, s3)
    if fmt == "csv":
        return _read_csv(chunk, s3)
    if fmt == "parquet":
        return _read_parquet(chunk, s3)
    if fmt == "text":
        if text_unit == "line":
            return _read_jsonl(chunk, s3, as_text=True)
        return _read_text_blocks(chunk, s3, text_unit)
    raise PrepError(f"{chunk.source.uri}: unsupported input format {fmt!r}")
