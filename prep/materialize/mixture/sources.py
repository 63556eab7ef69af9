"""The tables of a mixture, opened, pinned and checked against each other.

Every source is opened at a pinned version (the newest, unless the plan pins one),
its filter selects its rows once (their row addresses, 8 bytes a row), and its
rows' token counts are read when the plan needs them (weighing by tokens, or an
epoch size in tokens). The sources must be able to share one output: the same
columns and types, packed or unpacked alike, the same tokenizer (the hash in each
table's ``prep`` metadata). Any mismatch is one line naming both tables.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prep.contracts.foreign import serving_metadata
from prep.contracts.table import TableMetadata
from prep.io import lance_tables

from prep.io import storage
from prep.io.table_checksums import require_intact
from prep.errors import PrepError
from prep.plan import mixture
from prep.plan.spec import MixtureSource, MixtureSpec

__all__ = ["SOURCE_COLUMN", "OpenSource", "open_sources", "output_schema", "epoch_rows_for", "plan_sources",
           "row_tokens", "check_repeats"]

log = logging.getLogger("prep.materialize")
SOURCE_COLUMN = "source"  # uint16: the index of the row's table in the mixture file


@dataclass(frozen=True, kw_only=True)
class OpenSource:
    """One source, opened at its pinned version.

    Args:
        index: its place in the mixture (the ``source`` column's value).
        spec: its plan entry, version pinned.
        dataset: the open table at that version.
        metadata: the table's ``prep`` metadata.
        num_rows: rows in the table.
        addresses: row addresses of the rows its filter selected (None: no filter, all rows).
        lengths: tokens of each selected row (None unless the plan needs them).
    """

    index: int
    spec: MixtureSource
    dataset: Any
    metadata: TableMetadata
    num_rows: int
    addresses: np.ndarray | None
    lengths: np.ndarray | None

    @property
    def selected(self) -> int:
        return self.num_rows if self.addresses is None else len(self.addresses)

    def take(self, rows: np.ndarray, columns: Sequence[str]) -> pa.Table:
        """Selected rows ``rows`` (positions among the selected rows), in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.addresses is None:
            return self.dataset.take(rows, columns=list(columns))
        return self.dataset._take_rows(pa.array(self.addresses[rows]), columns=list(columns))

    def read_all(self, columns: Sequence[str]) -> pa.Table:
        """All selected rows in order: one scan, into one chunk (taking rows out of a chunked table copies it whole)."""
        return self.dataset.to_table(columns=list(columns), filter=self.spec.filter, batch_size=max(1, self.selected))


def row_tokens(table: pa.Table | pa.RecordBatch) -> np.ndarray:
    """Tokens of each row: its ``length`` column, else the lengths of ``input_ids``, else zeros."""
    names = table.schema.names
    if "length" in names:
        return np.asarray(table.column("length"), dtype=np.int64)
    if "input_ids" in names:
        col = table.column("input_ids")
        return np.asarray(pc.list_value_length(col).fill_null(0), dtype=np.int64)
    return np.zeros(table.num_rows, dtype=np.int64)


def _open(index: int, src: MixtureSource, s3: storage.S3Options, need_lengths: bool) -> OpenSource:
    uri = src.table if storage.is_remote(src.table) else os.path.abspath(src.table)
    if not storage.is_remote(uri) and not os.path.exists(uri):
        raise PrepError(f"mixture source {index} table {src.table}: no such path; pass a prepared Lance table")
    opts = storage.lance_storage_options(uri, s3)
    newest = lance_tables.open_table(uri, storage_options=opts).version
    version = src.version or newest
    if version > newest:
        raise PrepError(f"mixture source {index} table {src.table}: version {version} does not exist (its newest is "
                        f"{newest}); name a version up to {newest}, or leave version out for the newest")
    ds = lance_tables.open_table(uri, version=version, storage_options=opts)
    require_intact(uri, version, s3)  # a damaged file is named and refused before any row is read
    addresses = None
    if src.filter:
        try:
            addresses = ds.to_table(columns=[], filter=src.filter, with_row_address=True).column("_rowaddr").to_numpy()
        except (ValueError, OSError) as exc:
            raise PrepError(f"mixture source {uri}: filter {src.filter!r} failed: {str(exc).splitlines()[0][:300]}") from None
    lengths = None
    if need_lengths:
        cols = ["length"] if "length" in ds.schema.names else ["input_ids"]
        lengths = row_tokens(ds.to_table(columns=cols, filter=src.filter))
    opened = OpenSource(index=index, spec=replace(src, table=uri, version=version), dataset=ds,
                        metadata=serving_metadata(ds, uri), num_rows=ds.count_rows(), addresses=addresses, lengths=lengths)
    if opened.metadata.inferred is not None:
        log.warning("mixture source %d: %s", index, opened.metadata.inferred)
    if opened.selected == 0:
        why = f"its filter {src.filter!r} selects none of its {opened.num_rows:,} rows" if src.filter else "it is empty"
        raise PrepError(f"mixture source {uri} (version {version}): {why}; drop it or loosen the filter")
    return opened


def _columns(s: OpenSource) -> list[str]:
    names = s.dataset.schema.names
    cols = list(s.spec.columns or names)
    unknown = [c for c in cols if c not in names]
    if unknown:
        raise PrepError(f"mixture source {s.spec.table}: columns {unknown} are not in the table; it has {names}")
    if SOURCE_COLUMN in cols:
        raise PrepError(f"mixture source {s.spec.table} has a column {SOURCE_COLUMN!r}, which mixtures write themselves: "
                        "leave it out with `columns:`")
    return cols


def output_schema(sources: Sequence[OpenSource]) -> pa.Schema:
    """The columns every source writes, plus ``source``; all sources must agree (one line naming both tables)."""
    first = sources[0]
    schema = pa.schema([pa.field(c, first.dataset.schema.field(c).type) for c in _columns(first)])
    packed = first.metadata.kind == "packed"
    token = first.metadata.tokenizer.hash if first.metadata.tokenizer else None
    for s in sources[1:]:
        a, b = first.spec.table, s.spec.table
        if (s.metadata.kind == "packed") != packed:
            raise PrepError(f"mixture: {a} is {'' if packed else 'not '}packed and {b} is {'not ' if packed else ''}packed: "
                            "packed and unpacked tables cannot be mixed (their rows batch differently)")
        other = s.metadata.tokenizer.hash if s.metadata.tokenizer else None
        if other != token:
            raise PrepError(f"mixture: {a} and {b} were tokenized with different tokenizers (hash {str(token)[:12]} vs "
                            f"{str(other)[:12]}): re-prepare one of them with the other's tokenizer")
        mine = pa.schema([pa.field(c, s.dataset.schema.field(c).type) for c in _columns(s)])
        if not mine.equals(schema):
            raise PrepError(f"mixture: {a} writes columns {schema.names} {[str(t) for t in schema.types]} but {b} writes "
                            f"{mine.names} {[str(t) for t in mine.types]}: give both the same `columns:`")
    return schema.append(pa.field(SOURCE_COLUMN, pa.uint16()))


def open_sources(mix: MixtureSpec, s3: storage.S3Options) -> list[OpenSource]:
    """Opens and checks every source of ``mix`` (versions pinned to the newest unless given)."""
    need = mix.weight_by == "tokens" or mix.epoch_tokens is not None
    sources = [_open(i, src, s3, need) for i, src in enumerate(mix.sources)]
    output_schema(sources)
    return sources


def _mean_tokens(mix: MixtureSpec, sources: Sequence[OpenSource]) -> float:
    """Tokens of an average output row: each source's mean, weighed by its share of the rows."""
    means = np.array([max(float(np.mean(s.lengths)), 1.0) for s in sources])
    w = np.array([s.weight for s in mix.sources], dtype=np.float64)
    rows = w if mix.weight_by == "rows" else w / means  # by tokens, a source's rows are its tokens over its mean
    return float((rows / rows.sum() * means).sum())


def epoch_rows_for(mix: MixtureSpec, sources: Sequence[OpenSource], num_splits: int) -> int:
    """Rows per epoch, a multiple of ``u = lcm(G, S)`` (:func:`prep.plan.mixture.epoch_unit`: whole
    global batches, the same rows in every split): as given; from ``epoch_tokens`` over the mean tokens
    of a mixture row (rounded to the nearest multiple of ``u``); else all selected rows of all sources
    (rounded down to a multiple of ``u``)."""
    unit = mixture.epoch_unit(mix.global_batch, num_splits)
    if mix.epoch_rows is not None:
        return mix.epoch_rows
    if mix.epoch_tokens is not None:
        return max(unit, round(mix.epoch_tokens / _mean_tokens(mix, sources) / unit) * unit)
    total = sum(s.selected for s in sources)
    if total < unit:
        raise PrepError(f"mixture: its sources hold {total} rows, fewer than {unit} (the least common multiple of the "
                        f"global batch {mix.global_batch} and the {num_splits} splits, the smallest epoch); set "
                        f"epoch_rows: {unit} (sources repeat), or use fewer splits")
    return total // unit * unit


def plan_sources(mix: MixtureSpec, sources: Sequence[OpenSource]) -> list[mixture.Source]:
    """The sources as the pure plan (:mod:`prep.plan.mixture`) sees them."""
    return [mixture.Source(rows=s.selected, weight=m.weight, lengths=s.lengths) for s, m in zip(sources, mix.sources)]


def check_repeats(mix: MixtureSpec, sources: Sequence[OpenSource], epoch: int, counts: np.ndarray) -> None:
    """Refuses an epoch that goes through a source's rows more than its ``max_repeats`` times."""
    for s, m, n in zip(sources, mix.sources, counts):
        if m.max_repeats is not None and n > m.max_repeats * s.selected:
            raise PrepError(f"mixture source {s.index} ({m.table}): epoch {epoch} takes {int(n):,} rows of its "
                            f"{s.selected:,} ({n / s.selected:.2f} passes), more than its max_repeats {m.max_repeats}; "
                            "lower its weight or the epoch size, or raise max_repeats")
