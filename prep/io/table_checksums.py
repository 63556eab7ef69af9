"""Computing and checking the checksums of a prepared table's files (the record: :mod:`prep.contracts.checksums`).

At a commit (:func:`checksums_for`) the files of the fragments the new version holds are
listed; a file the version it grows from records keeps its digest (Lance never rewrites a
file), the others are read back and hashed. At a check (:func:`check_table`) every file of
the version is read again and its size and digest compared with the record, so a byte
flipped anywhere in the table is named by its file. Files are hashed several at once
(hashlib releases the GIL): sha256 runs at ~1.5 GB/s a core here, so the check costs about
one read of the table, a few percent of a materialize of it (docs/materialize.md).
"""

from __future__ import annotations

import hashlib
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable

import lance
from lance.fragment import FragmentMetadata

from prep.contracts.checksums import FileChecksum, TableChecksums, read_checksums
from prep.errors import PrepError, one_line
from prep.io import lance_tables, storage

__all__ = ["fragment_files", "checksums_for", "TableCheck", "check_table", "require_intact"]

log = logging.getLogger(__name__)

_THREADS = 8
_CHUNK = 8 << 20


def fragment_files(fragments: Iterable[FragmentMetadata]) -> list[str]:
    """Every file the fragments are made of (data files, deletion files), relative to the table folder."""
    out: list[str] = []
    for f in fragments:
        out += [f"data/{d.path}" for d in f.files]
        if f.deletion_file is not None:
            out.append(f.deletion_file.path(f.id))
    return out


def _digest(table: str, rel: str, s3: storage.S3Options | None) -> FileChecksum:
    fs, path = storage.filesystem(storage.join(table, rel), s3)
    fs.invalidate_cache(path)  # Lance wrote it, not fsspec: a listing fsspec cached before may not hold it
    h, size = hashlib.sha256(), 0
    with fs.open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return FileChecksum(size=size, sha256=h.hexdigest())


def _digests(table: str, files: list[str], s3: storage.S3Options | None) -> dict[str, FileChecksum | str]:
    """Each file's checksum, or why it could not be read."""
    def one(rel: str) -> FileChecksum | str:
        try:
            return _digest(table, rel, s3)
        except FileNotFoundError:
            return "is missing"
        except OSError as exc:
            return f"cannot be read ({one_line(exc, limit=160)})"

    with ThreadPoolExecutor(min(_THREADS, max(1, len(files))), thread_name_prefix="checksum") as pool:
        return dict(zip(files, pool.map(one, files)))


def checksums_for(table: str, fragments: Iterable[FragmentMetadata], s3: storage.S3Options | None,
                  base: lance.LanceDataset | None = None) -> TableChecksums:
    """The record of the version about to hold ``fragments`` (of the table at ``table``); files the
    version ``base`` (the one the commit builds on, or None) records are not read again.

    Raises:
        PrepError: a file of the new version cannot be read (the commit would name a file that is not there).
    """
    known = {}
    if base is not None:
        record = read_checksums(base.schema.metadata, f"{table} (version {base.version})")
        known = dict(record.files) if record is not None else {}
    files = fragment_files(fragments)
    hashed = _digests(table, [p for p in files if p not in known], s3)
    bad = [f"{p} {why}" for p, why in hashed.items() if isinstance(why, str)]
    if bad:
        raise PrepError(f"{table}: {bad[0]} just after it was written; nothing was committed: rerun the command")
    return TableChecksums(files={p: known[p] if p in known else hashed[p] for p in files})


@dataclass(frozen=True)
class TableCheck:
    """What :func:`check_table` read and found: ``recorded`` is False for a version without checksums
    (written before prep recorded them), whose files are then not checked; ``unrecorded`` are the
    files of the version its record does not list (added outside prep: a plain Lance append, a
    compaction, a copy that kept the schema metadata), not checked either."""

    uri: str
    version: int
    recorded: bool
    files: int
    bytes: int
    problems: tuple[str, ...]
    unrecorded: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


def check_table(uri: str, version: int | None = None, s3: storage.S3Options | None = None) -> TableCheck:
    """Reads every file of ``uri`` at ``version`` (default: the newest) and compares it with the
    checksums its commit recorded; each problem names the file.

    Raises:
        PrepError: no table at ``uri``, or a checksum record that breaks its contract.
    """
    ds = lance_tables.open_table(uri, version, storage.lance_storage_options(uri, s3))
    where = f"{uri} (version {ds.version})"
    record = read_checksums(ds.schema.metadata, where)
    files = fragment_files(f.metadata for f in ds.get_fragments())
    if record is None:
        return TableCheck(uri=uri, version=ds.version, recorded=False, files=len(files), bytes=0, problems=())
    problems = []
    got = _digests(uri, [p for p in files if p in record.files], s3)
    for p, found in got.items():
        want = record.files[p]
        if isinstance(found, str):
            problems.append(f"{p} {found}")
        elif found.size != want.size:
            problems.append(f"{p} has {found.size} bytes, {want.size} at its commit")
        elif found.sha256 != want.sha256:
            problems.append(f"{p}: sha256 {found.sha256[:12]}... != {want.sha256[:12]}... recorded at its commit: "
                            "the file is damaged")
    size = sum(g.size for g in got.values() if isinstance(g, FileChecksum))
    return TableCheck(uri=uri, version=ds.version, recorded=True, files=len(files), bytes=size, problems=tuple(problems),
                      unrecorded=tuple(p for p in files if p not in record.files))


def require_intact(uri: str, version: int | None, s3: storage.S3Options | None) -> TableCheck:
    """:func:`check_table`, refusing a damaged table before anything reads its rows.

    Raises:
        PrepError: one line naming the first damaged file and what to do.
    """
    found = check_table(uri, version, s3)
    if not found.recorded:
        log.info("%s (version %d) records no file checksums (written before prep recorded them): not checked",
                 uri, found.version)
    elif found.unrecorded:
        log.info("%s (version %d): %d of its %d files were not written by a prep commit: not checked",
                 uri, found.version, len(found.unrecorded), found.files)
    if found.problems:
        more = f" (and {len(found.problems) - 1} more)" if len(found.problems) > 1 else ""
        raise PrepError(f"table {uri} (version {found.version}) is damaged: {found.problems[0]}{more}; restore it or "
                        f"prepare it anew (the command that wrote it, with --overwrite); `prep verify {uri}` lists the files")
    return found
