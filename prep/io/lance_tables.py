"""Writing and opening Lance tables the way every prep stage does.

Writers produce fragments in parallel (Ray tasks call :func:`write_fragments`)
and the driver commits them once (:func:`commit_table`): until that commit there is
no table version, so a job that dies part-way leaves nothing that looks complete.
"""

from __future__ import annotations

import logging
from typing import Iterable

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata
from lance.schema import LanceSchema

from prep.contracts.table import RejectsMetadata, TableMetadata, encode_metadata
from prep.io import storage
from prep.errors import PrepError, one_line

__all__ = ["table_exists", "open_table", "write_fragments", "commit_table", "commit_grown", "remove_table"]

log = logging.getLogger(__name__)


def table_exists(uri: str, storage_options: dict[str, str] | None = None) -> bool:
    """True when ``uri`` holds a committed Lance table; False only when Lance finds none.

    Raises:
        PrepError: the table could not be read (a storage error, a corrupt manifest):
            that is never "no table", or a caller could take a real table for leftovers.
    """
    try:
        lance.dataset(uri, storage_options=storage_options)
    except (ValueError, OSError) as exc:
        if _not_found(exc):
            return False
        raise PrepError(f"cannot read the Lance table at {uri} ({one_line(exc, limit=200)})") from None
    return True


def open_table(
    uri: str, version: int | None = None, storage_options: dict[str, str] | None = None
) -> lance.LanceDataset:
    """Opens a committed table, with a one-line error when there is none."""
    try:
        return lance.dataset(uri, version=version, storage_options=storage_options)
    except (ValueError, OSError) as exc:
        at = f" at version {version}" if version is not None else ""
        what = "no Lance table" if _not_found(exc) else "cannot read the Lance table"
        raise PrepError(f"{what} at {uri}{at} ({one_line(exc, limit=200)})") from None


def _not_found(exc: Exception) -> bool:
    return isinstance(exc, FileNotFoundError) or "was not found" in str(exc)


def write_fragments(
    table: pa.Table | pa.RecordBatchReader,
    uri: str,
    *,
    storage_options: dict[str, str] | None = None,
    max_rows_per_file: int = 1 << 20,
) -> list[FragmentMetadata]:
    """Writes data files for ``table`` under ``uri`` without committing them."""
    return lance.fragment.write_fragments(
        table, uri, max_rows_per_file=max_rows_per_file, storage_options=storage_options
    )


def commit_table(
    uri: str,
    schema: pa.Schema,
    fragments: Iterable[FragmentMetadata],
    *,
    metadata: TableMetadata | RejectsMetadata | None = None,
    storage_options: dict[str, str] | None = None,
) -> lance.LanceDataset:
    """Commits ``fragments`` (in the given order) as the new content of ``uri``.

    ``metadata`` is stored in the schema (:mod:`prep.contracts.table`), so the
    table describes itself (config, tokenizer, sources, counts).
    """
    if metadata is not None:
        schema = schema.with_metadata({**(schema.metadata or {}), **encode_metadata(metadata)})
    op = lance.LanceOperation.Overwrite(schema, list(fragments))
    return lance.LanceDataset.commit(uri, op, storage_options=storage_options)


def commit_grown(
    base: lance.LanceDataset,
    schema: pa.Schema,
    keep: list[FragmentMetadata],
    new: Iterable[FragmentMetadata],
    *,
    metadata: TableMetadata | RejectsMetadata,
    intact: bool,
    storage_options: dict[str, str] | None = None,
) -> lance.LanceDataset:
    """Commits ``keep`` (fragments of ``base``, as read from it) then ``new`` as the version after
    ``base``, with ``metadata`` in the schema: one commit, and no data file is rewritten.

    ``intact``: ``keep`` is every fragment of ``base`` unchanged. Then, when ``base`` is the
    latest version, it is a Lance ``Merge`` that keeps their fragment ids and row addresses;
    otherwise (rows deleted, or ``base`` is not the latest) an ``Overwrite`` of the same
    fragments, which renumbers fragment ids but keeps row order.
    """
    if not base.schema.equals(schema, check_metadata=False):
        raise PrepError(f"{base.uri} has columns {base.schema.names} of other types than this job writes ({schema.names}); "
                        "prepare the table anew with --overwrite")
    schema = schema.with_metadata({**(schema.metadata or {}), **encode_metadata(metadata)})
    new = list(new)
    if intact and base.version == base.latest_version:
        start = max((f.id for f in keep), default=-1) + 1
        for i, frag in enumerate(new):
            frag.id = start + i
        op: lance.LanceOperation.BaseOperation = lance.LanceOperation.Merge(keep + new, LanceSchema.from_pyarrow(schema))
    else:
        op = lance.LanceOperation.Overwrite(schema, keep + new)
    return lance.LanceDataset.commit(base.uri, op, read_version=base.latest_version, storage_options=storage_options)


def remove_table(uri: str, s3: storage.S3Options | None = None) -> None:
    """Deletes a table directory (used for ``--overwrite`` and to clear orphans)."""
    fs, path = storage.filesystem(uri, s3)
    if fs.exists(path):
        fs.rm(path, recursive=True)
