"""Tiny prepared tables and materialized outputs, made in a test's tmp_path from synthetic tokens.

No real data and no tokenizer: tests built on these never skip. The materialized output
records the prepared table as its source, so an on-the-fly plan over the table and the
output share a fingerprint (and reader states carry over between them).
"""

from __future__ import annotations

import os

import lance

from prep.contracts.manifest import Manifest
from prep.contracts.table import read_table_metadata

import reader_fixtures as rf
import tables

__all__ = ["tiny_prepared", "tiny_materialized"]


def tiny_prepared(path: str, *, num_rows: int, seed: int = 0) -> str:
    """A prepared sft table of ``num_rows`` short random rows (3..12 tokens) at ``path``."""
    return tables.synthetic_table(path, num_rows=num_rows, seed=seed, min_len=3, max_len=12)


def tiny_materialized(out: str, prepared: str, *, num_splits: int, epochs: int, seed: int = 0,
                      strategy: str = "random") -> Manifest:
    """``prepared`` materialized under ``out`` with the plan ``{num_splits, strategy, seed}``."""
    ds = lance.dataset(prepared)
    return rf.write_materialized(out, ds.to_table(), read_table_metadata(ds, prepared).to_json(), num_splits=num_splits, epochs=epochs,
                                 strategy=strategy, seed=seed, source_uri=os.path.abspath(prepared),
                                 source_version=ds.version)
