"""One pass over a split dataset for ``prep verify``: rows, content checksum, the columns it compares, token ids' range.

Reading a split once serves every check (the checksum needs every byte anyway),
so verify costs one scan of the output, whatever it compares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from prep.io import lance_tables, storage
from prep.io.checksum import Checksum

__all__ = ["SplitScan", "scan_split", "TOKEN_COLUMN"]

TOKEN_COLUMN = "input_ids"


@dataclass(frozen=True)
class SplitScan:
    """What one read of a split found: rows, checksum, ``columns`` (kept), and the smallest and
    largest token id (None without an ``input_ids`` column or without tokens)."""

    rows: int
    checksum: str
    columns: pa.Table
    token_range: tuple[int, int] | None

    def tokens_outside(self, vocab_size: int | None) -> str | None:
        """Why the split's token ids are not all ids of a ``vocab_size`` vocabulary (None: they are, or unknown)."""
        if vocab_size is None or self.token_range is None:
            return None
        low, high = self.token_range
        if low < 0 or high >= vocab_size:
            return f"token ids range over [{low}, {high}], outside the tokenizer's vocabulary [0, {vocab_size})"
        return None


def scan_split(uri: str, s3: storage.S3Options | None, keep: Sequence[str]) -> SplitScan:
    """Reads the split at ``uri`` once, in order.

    Raises:
        OSError, ValueError: the dataset is missing or cannot be read (Lance's errors).
    """
    ds = lance_tables.open_table(uri, storage_options=storage.lance_storage_options(uri, s3))
    checksum, kept, low, high = Checksum(), [], None, None
    for batch in ds.to_batches(batch_size=8192):
        checksum.update(batch)
        kept.append(batch.select([c for c in keep if c in batch.schema.names]))
        if TOKEN_COLUMN in batch.schema.names:
            values = pc.list_flatten(batch.column(TOKEN_COLUMN))
            if len(values):
                bounds = pc.min_max(values)
                lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
                if lo is not None:
                    low, high = (lo, hi) if low is None else (min(low, lo), max(high, hi))
    names = [c for c in keep if c in ds.schema.names]
    table = pa.Table.from_batches(kept, schema=pa.schema([ds.schema.field(c) for c in names])) if kept else \
        ds.to_table(columns=names)
    return SplitScan(rows=checksum.num_rows, checksum=checksum.hexdigest(), columns=table,
                     token_range=(int(low), int(high)) if low is not None else None)

