"""Writing and opening Lance tables the way every prep stage does.

Writers produce fragments in parallel (Ray tasks call :func:`write_fragments`)
and the driver commits them once (:func:`commit_table`): until that commit there is
no table version, so a job that dies part-way leaves nothing that looks complete.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata
from lance.schema import LanceSchema

from prep.contracts.checksums import TableChecksums, encode_checksums
from prep.contracts.table import RejectsMetadata, TableMetadata, encode_metadata
from prep.io import storage
from prep.errors import PrepError, one_line

__all__ = ["table_exists", "open_table", "write_fragments", "commit_table", "commit_grown", "unfinished", "remove_table"]

# The commit message of a step's rows committed without its metadata (which commits next).
_UNFINISHED = "prep: a step's rows; its metadata commits next"

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
    fresh: bool = False,
) -> list[FragmentMetadata]:
    """Writes data files for ``table`` under ``uri`` without committing them.

    ``fresh``: the fragments start a new table (a first run or an ``--overwrite``), so they are not
    checked against the schema of a table already at ``uri``, which the commit replaces whatever it holds.
    """
    return lance.fragment.write_fragments(
        table, uri, mode="overwrite" if fresh else "append", max_rows_per_file=max_rows_per_file, storage_options=storage_options
    )


def commit_table(
    uri: str,
    schema: pa.Schema,
    fragments: Iterable[FragmentMetadata],
    *,
    metadata: TableMetadata | RejectsMetadata | None = None,
    checksums: TableChecksums | None = None,
    storage_options: dict[str, str] | None = None,
) -> lance.LanceDataset:
    """Commits ``fragments`` (in the given order) as the new content of ``uri``.

    ``metadata`` is stored in the schema (:mod:`prep.contracts.table`), so the
    table describes itself (config, tokenizer, sources, counts); so are ``checksums``,
    the record of its files (:mod:`prep.contracts.checksums`), in the same commit.
    """
    if metadata is not None:
        schema = schema.with_metadata({**(schema.metadata or {}), **encode_metadata(metadata)})
    if checksums is not None:
        schema = schema.with_metadata({**(schema.metadata or {}), **encode_checksums(checksums)})
    op = lance.LanceOperation.Overwrite(schema, list(fragments))
    return lance.LanceDataset.commit(uri, op, storage_options=storage_options)


def commit_grown(
    base: lance.LanceDataset,
    schema: pa.Schema,
    keep: list[FragmentMetadata],
    new: Iterable[FragmentMetadata],
    *,
    metadata: Callable[[int], TableMetadata | RejectsMetadata],
    checksums: TableChecksums | None = None,
    storage_options: dict[str, str] | None = None,
) -> lance.LanceDataset:
    """Commits ``keep`` (fragments of ``base``, as read from it, some with rows deleted) then ``new``
    on top of ``base``, with ``metadata(version)`` (and ``checksums``, the record of the files of
    ``keep`` and ``new``) in the schema; no data file is rewritten.

    When ``base`` is not the latest version (a step killed after it committed on top of ``base``),
    ``base`` is restored first, so this step replaces that one's. Then one commit where Lance has
    an operation for it: a ``Merge`` when no fragment goes (kept fragments keep their ids, deleted
    rows are marked in deletion files), an ``Overwrite`` when whole fragments go and no kept one
    has deleted rows. Both at once (an ``--update`` of single images) is an ``Update`` and then the
    metadata (``UpdateConfig``): a reader of the latest version between the two sees the new rows
    under the metadata before, whose last step names the version it describes; a step killed there
    is rebuilt from that version (:func:`unfinished`, :func:`prep.prepare.growth.read_prior`).
    """
    if not base.schema.equals(schema, check_metadata=False):
        raise PrepError(f"{base.uri} has columns {base.schema.names} of other types than this job writes ({schema.names}); "
                        "prepare the table anew with --overwrite")
    if base.version != base.latest_version:
        base.restore()
        base = lance.dataset(base.uri, storage_options=storage_options)
    new = list(new)
    dropped = sorted({f.fragment_id for f in base.get_fragments()} - {f.id for f in keep})

    def entries(version: int) -> dict[bytes, bytes]:
        return {**encode_metadata(metadata(version)), **(encode_checksums(checksums) if checksums is not None else {})}

    def with_metadata(version: int) -> pa.Schema:
        return schema.with_metadata({**(schema.metadata or {}), **entries(version)})

    def commit(op: lance.LanceOperation.BaseOperation, on: lance.LanceDataset, message: str | None = None) -> lance.LanceDataset:
        return lance.LanceDataset.commit(on.uri, op, read_version=on.version, storage_options=storage_options, commit_message=message)

    if not dropped:
        start = max((f.id for f in keep), default=-1) + 1
        for i, frag in enumerate(new):
            frag.id = start + i
        return commit(lance.LanceOperation.Merge(keep + new, LanceSchema.from_pyarrow(with_metadata(base.version + 1))), base)
    if not any(f.deletion_file for f in keep):
        return commit(lance.LanceOperation.Overwrite(with_metadata(base.version + 1), keep + new), base)
    entry = entries(base.version + 2)
    if entry.items() <= (base.schema.metadata or {}).items():  # the metadata stays (a rejects table): one commit
        return commit(lance.LanceOperation.Update(removed_fragment_ids=dropped, updated_fragments=keep, new_fragments=new), base)
    grown = commit(lance.LanceOperation.Update(removed_fragment_ids=dropped, updated_fragments=keep, new_fragments=new), base, _UNFINISHED)
    update = lance.LanceOperation.UpdateMap({k.decode(): v.decode() for k, v in entry.items()})
    return commit(lance.LanceOperation.UpdateConfig(schema_metadata_updates=update), grown)


def unfinished(ds: lance.LanceDataset) -> int | None:
    """The version ``ds`` (its latest version) was committed on top of when it is the first half of a
    :func:`commit_grown` whose metadata commit never came (the step was killed); else None."""
    done = ds.read_transaction(ds.version)
    if done is None or (done.transaction_properties or {}).get("__lance_commit_message") != _UNFINISHED:
        return None
    return int(done.read_version)


def remove_table(uri: str, s3: storage.S3Options | None = None) -> None:
    """Deletes a table directory (used for ``--overwrite`` and to clear orphans)."""
    fs, path = storage.filesystem(uri, s3)
    if fs.exists(path):
        fs.rm(path, recursive=True)
