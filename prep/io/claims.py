"""Claiming an output and removing what prep owns there: the reads and writes of the claim, whose rules
are :mod:`prep.contracts.ownership` (the caller holds the lease, :mod:`prep.io.lease`).

A storage error while looking is an error, never "absent": a transient failure must not
make a real table look like leftovers. :func:`remove_owned` is the one remover of files a
layout owns; nothing else in prep deletes an output's files.
"""

from __future__ import annotations

import logging
import os
import posixpath
from typing import Any, Sequence

from prep.contracts.cache_marker import CacheMarker
from prep.contracts.marker import JOB_MARKER, JobMarker
from prep.contracts.ownership import CACHE_MARKER, LEASE, OutputClaim, classify, leftovers, removal_order
from prep.contracts.table import METADATA_KEY
from prep.errors import PrepError, one_line
from prep.io import lance_tables, storage

__all__ = ["entries", "inspect_output", "claim_outputs", "write_marker", "write_cache_marker", "remove_owned"]

log = logging.getLogger(__name__)


def entries(uri: str, s3: storage.S3Options | None = None) -> list[str] | None:
    """Names directly under ``uri`` (its lease left out); None when nothing is there. Storage errors raise."""
    fs, path = storage.filesystem(uri, s3)
    try:
        if fs.isfile(path):
            raise PrepError(f"{uri} is a file, not a table folder; choose another output path")
        listed = fs.ls(path, detail=False, refresh=True) if storage.is_remote(uri) else fs.ls(path, detail=False)
    except FileNotFoundError:
        return None
    except PrepError:
        raise
    except Exception as exc:  # permission denied, throttling, network: never read as "absent"
        raise PrepError(f"cannot check the output {uri} ({type(exc).__name__}: {one_line(exc, limit=200)}); nothing was changed") from None
    return sorted(n for n in (posixpath.basename(p.rstrip("/")) for p in listed) if n != LEASE)


def inspect_output(uri: str, s3: storage.S3Options | None = None) -> OutputClaim:
    """Classifies ``uri`` (:func:`prep.contracts.ownership.classify`); raises for anything prep must not touch."""

    def preps_table() -> bool:
        ds = lance_tables.open_table(uri, storage_options=storage.lance_storage_options(uri, s3))
        return METADATA_KEY in (ds.schema.metadata or {})

    return classify(uri, entries(uri, s3), preps_table)


def claim_outputs(uris: list[str], job: str, *, overwrite: bool, s3: storage.S3Options | None = None) -> list[OutputClaim]:
    """Checks every path in ``uris`` first, then makes each this job's: clears a dead
    job's leftovers and writes the marker. Nothing is written unless all paths pass.
    The caller holds the leases on ``uris`` (:func:`prep.io.lease.hold`): leftovers are a dead job's only then.

    Raises:
        PrepError: a path holds something prep did not write, a table exists and
            ``overwrite`` is off, or the storage could not be read.
    """
    claims = [inspect_output(uri, s3) for uri in uris]
    for claim in claims:
        if claim.state == "table" and not overwrite:
            raise PrepError(f"{claim.uri} already holds a table; pass --overwrite (or overwrite: true) to replace it")
    for claim in claims:
        if claim.state == "leftovers":
            log.warning("%s: clearing the leftovers of a prep job that died before its commit", claim.uri)
            remove_owned(claim.uri, leftovers(entries(claim.uri, s3) or []), s3)
        write_marker(claim.uri, JobMarker.now(job), s3)
    return claims


def write_marker(uri: str, marker: JobMarker, s3: storage.S3Options | None = None) -> None:
    """Writes ``marker`` as :data:`JOB_MARKER` in the folder ``uri`` (atomically)."""
    _write(uri, JOB_MARKER, marker.to_json(), s3)


def write_cache_marker(uri: str, marker: CacheMarker, s3: storage.S3Options | None = None) -> None:
    """Writes ``marker`` as :data:`CACHE_MARKER` in the folder ``uri`` (atomically)."""
    _write(uri, CACHE_MARKER, marker.to_json(), s3)


def _write(uri: str, name: str, doc: dict[str, Any], s3: storage.S3Options | None) -> None:
    try:
        storage.write_json_atomic(storage.join(uri, name), doc, s3)
    except OSError as exc:  # e.g. a bucket that does not exist: say where
        raise PrepError(f"cannot write to {uri} ({type(exc).__name__}: {one_line(exc, limit=200)})") from None


def remove_owned(uri: str, owned: Sequence[str], s3: storage.S3Options | None = None) -> None:
    """Removes ``owned`` (paths under ``uri`` that the caller's layout wrote, files or trees), and nothing else.

    Entries in sub-folders go first, then top-level ones, the markers last (a crash on the
    way leaves them, so a rerun may still clean up); a local sub-folder is removed only when
    removing its entries emptied it (never a folder prep did not put anything in).
    """
    fs, root = storage.filesystem(uri, s3)
    root = root.rstrip("/")
    emptied: set[str] = set()
    for rel in removal_order(owned):
        target = f"{root}/{rel}"
        if fs.exists(target):
            fs.rm(target, recursive=True)
        if "/" in rel:
            emptied.add(rel.rsplit("/", 1)[0])
    if not storage.is_remote(uri):
        for folder in sorted(emptied, reverse=True):
            try:
                os.rmdir(f"{root}/{folder}")
            except OSError:
                pass  # not empty: something else is there
