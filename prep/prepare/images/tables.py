"""Tabular inputs: manifests (path + label) and Parquet files holding image bytes.

A manifest is CSV, TSV, JSONL/JSON or Parquet with a path column and, unless
``label_column`` is null, a label column; the driver reads it whole (it is small
next to the images). A Parquet image table is planned by row groups from its footer,
like the text sources, and read by workers. Its image column is binary, or a struct
with a ``bytes`` field (the Hugging Face ``Image`` feature); Hugging Face
``ClassLabel`` names in the schema metadata become the class names.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from prep.io import storage
from prep.errors import PrepError
from prep.prepare.images.config import ImagesConfig
from prep.prepare.listing import row_group_ranges
from prep.prepare.ids import key_hash
from prep.prepare.images.samples import ROW_KEY, Sample
from prep.prepare.rejects import Reject

__all__ = [
    "LabelRow",
    "ParquetChunk",
    "read_label_file",
    "parquet_columns",
    "parquet_chunks",
    "parquet_label_names",
    "parquet_labels",
    "read_parquet",
]


@dataclass(frozen=True)
class ParquetChunk:
    """Row groups ``[start, end)`` of one Parquet file whose first row is ``first_row``."""

    uri: str
    key: str
    start: int
    end: int
    first_row: int

    def __str__(self) -> str:
        return f"{self.uri} [row groups {self.start}-{self.end})"


def _open(uri: str, s3: storage.S3Options | None) -> pq.ParquetFile:
    fs, path = storage.filesystem(uri, s3)
    try:
        return pq.ParquetFile(fs.open(path, "rb"))
    except Exception as exc:
        raise PrepError(f"{uri}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None


def _require(uri: str, names: list[str], column: str, key: str) -> None:
    if column not in names:
        raise PrepError(f"{uri}: no column '{column}' (have {names[:12]}); set {key} in the config")


@dataclass(frozen=True)
class LabelRow:
    """One manifest row: where it is (``line N`` of JSON lines, ``data row N`` of CSV/TSV counting records
    after the header from 1, ``element N`` of a JSON array, ``row N`` of Parquet from 0, as the text sources
    say), its path and raw label, or the problem that makes it a reject."""

    position: str
    path: Any
    label: Any
    problem: str | None = None


def read_label_file(uri: str, path_column: str, label_column: str | None, s3: storage.S3Options | None) -> list[LabelRow]:
    """The manifest's rows, in file order.

    Raises:
        PrepError: the file cannot be parsed, or a configured column is missing.
    """
    fs, fpath = storage.filesystem(uri, s3)
    lower = uri.lower()
    if lower.endswith(".parquet"):
        table = _open(uri, s3).read()
    else:
        with fs.open(fpath, "rb") as f:
            data = f.read()
        if lower.endswith((".csv", ".tsv")):
            table = _read_csv(uri, data, "\t" if lower.endswith(".tsv") else ",")
        else:
            return _read_json_rows(uri, data, path_column, label_column)
    _require(uri, table.column_names, path_column, "path_column")
    if label_column is not None:
        _require(uri, table.column_names, label_column, "label_column (or null for unlabeled data)")
    paths = table.column(path_column).to_pylist()
    labels = table.column(label_column).to_pylist() if label_column else [None] * len(paths)
    where = "row {}" if lower.endswith(".parquet") else "data row {}"
    first = 0 if lower.endswith(".parquet") else 1
    return [LabelRow(where.format(first + i), p, lab) for i, (p, lab) in enumerate(zip(paths, labels))]


def _read_csv(uri: str, data: bytes, delimiter: str) -> pa.Table:
    import pyarrow.csv as pacsv

    try:
        return pacsv.read_csv(
            io.BytesIO(data),
            parse_options=pacsv.ParseOptions(delimiter=delimiter),
            convert_options=pacsv.ConvertOptions(strings_can_be_null=True),
        )
    except Exception as exc:
        raise PrepError(f"{uri}: cannot read the manifest: {str(exc).splitlines()[0]}") from None


def _read_json_rows(uri: str, data: bytes, path_column: str, label_column: str | None) -> list[LabelRow]:
    if data.lstrip()[:1] == b"[":
        try:
            rows = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PrepError(f"{uri}: not valid JSON ({exc})") from None
        lines = [(f"element {i}", r, None) for i, r in enumerate(rows)]
    else:
        lines = []
        for n, text in enumerate(data.splitlines(), 1):
            if not text.strip():
                continue
            try:
                lines.append((f"line {n}", json.loads(text), None))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                lines.append((f"line {n}", None, f"malformed JSON line: {exc}"))
    out: list[LabelRow] = []
    for where, row, problem in lines:
        if problem or not isinstance(row, dict):
            out.append(LabelRow(where, None, None, problem or f"expected a JSON object, got {type(row).__name__}"))
            continue
        if label_column is not None and label_column not in row:
            out.append(LabelRow(where, row.get(path_column), None, f"no '{label_column}' field (set label_column: null for unlabeled data)"))
            continue
        out.append(LabelRow(where, row.get(path_column), row.get(label_column) if label_column else None))
    return out


def parquet_columns(uri: str, s3: storage.S3Options | None) -> list[str]:
    return _open(uri, s3).schema_arrow.names


def parquet_chunks(uri: str, key: str, cfg: ImagesConfig, s3: storage.S3Options | None) -> list[ParquetChunk]:
    """Row-group ranges of about ``chunk_bytes`` and at most ``images_per_chunk`` rows (one group at least)."""
    pf = _open(uri, s3)
    _require(uri, pf.schema_arrow.names, cfg.image_column, "image_column")
    ranges = row_group_ranges(pf.metadata, cfg.chunk_bytes, cfg.images_per_chunk)
    return [ParquetChunk(uri, key, start, end, first) for start, end, first in ranges]


def parquet_label_names(uri: str, column: str | None, s3: storage.S3Options | None) -> list[str] | None:
    """Hugging Face ``ClassLabel`` names of ``column``, if the file carries them."""
    if column is None:
        return None
    raw = (_open(uri, s3).schema_arrow.metadata or {}).get(b"huggingface")
    try:
        feature = json.loads(raw)["info"]["features"][column] if raw else None
    except (KeyError, TypeError, json.JSONDecodeError):
        return None
    if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" and feature.get("names"):
        return [str(n) for n in feature["names"]]
    return None


def parquet_labels(uri: str, column: str | None, s3: storage.S3Options | None) -> list[Any]:
    """The raw values of the label column (read alone: cheap next to the images)."""
    if column is None:
        return []
    pf = _open(uri, s3)
    _require(uri, pf.schema_arrow.names, column, "label_column (or null for unlabeled data)")
    return pf.read(columns=[column]).column(0).to_pylist()


def _image_bytes(col: pa.ChunkedArray, uri: str, name: str) -> list[Any]:
    if pa.types.is_struct(col.type):
        if col.type.get_field_index("bytes") < 0:
            raise PrepError(f"{uri}: image column '{name}' is a struct without a 'bytes' field ({col.type})")
        return pa.chunked_array([c.field("bytes") for c in col.chunks], col.type.field("bytes").type).to_pylist()
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        return col.to_pylist()
    raise PrepError(f"{uri}: image column '{name}' has type {col.type}, not bytes; for a column of paths use source: manifest")


def read_parquet(chunk: ParquetChunk, cfg: ImagesConfig, s3: storage.S3Options | None) -> Iterator[Sample | Reject]:
    """Yields one sample (or reject) per row of the chunk's row groups."""
    columns = [c for c in dict.fromkeys([cfg.image_column, cfg.label_column, cfg.key_column]) if c]
    table = _open(chunk.uri, s3).read_row_groups(list(range(chunk.start, chunk.end)), columns=columns)
    images = _image_bytes(table.column(cfg.image_column), chunk.uri, cfg.image_column)
    labels = table.column(cfg.label_column).to_pylist() if cfg.label_column else [None] * len(images)
    keys = table.column(cfg.key_column).to_pylist() if cfg.key_column else None
    for i, (data, label) in enumerate(zip(images, labels)):
        row = chunk.first_row + i
        if data is None:
            yield Reject(chunk.uri, f"row {row}", f"column '{cfg.image_column}' is null")
            continue
        if keys is not None:
            yield Sample(data, f"{chunk.uri}#{keys[i]}", ROW_KEY, key_hash(str(keys[i])), label, chunk.uri, f"row {row}")
        else:
            yield Sample(data, f"{chunk.uri}#row={row}", chunk.key, row, label, chunk.uri, f"row {row}")
