"""Claiming an output path without ever destroying what prep did not write.

A job may write only where nothing is, where an empty folder is, or where prep
wrote before. It proves the last case with a marker, :data:`MARKER`, that it puts
in the folder before its first data file, and keeps there after the commit. So a
folder at ``--output`` is, in order:

- absent or empty: claimed (the marker is written);
- a marker plus Lance's own folders and no committed version: the leftovers of a
  job that died before its commit, cleared and claimed;
- a committed prep table (a marker, or prep's metadata in a table made before
  markers existed): replaced only with ``overwrite``, by a new version; the old
  versions' files are deleted after the commit;
- anything else (a user's files, a Lance table prep did not write, a marker beside
  foreign files): an error, with or without ``overwrite``, before anything is written.

A storage error while looking is an error, never "absent": a transient failure
must not make a real table look like leftovers.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

import prep
from prep.contracts.table import METADATA_KEY
from prep.io import lance_tables
from prep.io import storage
from prep.errors import PrepError, one_line

__all__ = ["MARKER", "OutputClaim", "inspect_output", "claim_outputs"]

MARKER = "_prep_job.json"
_LANCE_ENTRIES = {"data", "_versions", "_transactions", "_indices", "_deletions", "_refs"}

State = Literal["absent", "empty", "leftovers", "table"]


@dataclass(frozen=True)
class OutputClaim:
    """What was found at an output path, before anything was written there."""

    uri: str
    state: State


def _entries(uri: str, s3: storage.S3Options | None) -> list[str] | None:
    """Names directly under ``uri``; None when nothing is there. Storage errors raise."""
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
    return sorted(posixpath.basename(p.rstrip("/")) for p in listed)


def inspect_output(uri: str, s3: storage.S3Options | None = None) -> OutputClaim:
    """Classifies ``uri`` (see the module docstring); raises for anything prep must not touch."""
    names = _entries(uri, s3)
    if names is None:
        return OutputClaim(uri, "absent")
    if not names:
        return OutputClaim(uri, "empty")
    foreign = [n for n in names if n != MARKER and n not in _LANCE_ENTRIES]
    if foreign:
        shown = ", ".join(foreign[:3]) + (" ..." if len(foreign) > 3 else "")
        raise PrepError(f"{uri} exists and holds files prep did not write ({shown}); choose another output path or move them")
    if "_versions" in names:
        ds = lance_tables.open_table(uri, storage_options=storage.lance_storage_options(uri, s3))
        if MARKER not in names and METADATA_KEY not in (ds.schema.metadata or {}):
            raise PrepError(f"{uri} is a Lance table that prep did not write; prep replaces only its own tables: choose another output path")
        return OutputClaim(uri, "table")
    if MARKER not in names:
        raise PrepError(f"{uri} holds Lance files that no prep job claimed ({', '.join(names)}); choose another output path or remove it")
    return OutputClaim(uri, "leftovers")


def claim_outputs(uris: list[str], job: str, *, overwrite: bool, s3: storage.S3Options | None = None) -> list[OutputClaim]:
    """Checks every path in ``uris`` first, then makes each this job's: clears a dead
    job's leftovers and writes the marker. Nothing is written unless all paths pass.

    Raises:
        PrepError: a path holds something prep did not write, a table exists and
            ``overwrite`` is off, or the storage could not be read.
    """
    claims = [inspect_output(uri, s3) for uri in uris]
    for claim in claims:
        if claim.state == "table" and not overwrite:
            raise PrepError(f"{claim.uri} already holds a table; pass --overwrite (or overwrite: true) to replace it")
    marker = json.dumps({"written_by": "prep", "prep_version": prep.__version__, "job": job,
                         "claimed": datetime.now(timezone.utc).isoformat(timespec="seconds")}, indent=2).encode()
    for claim in claims:
        if claim.state == "leftovers":
            _clear_leftovers(claim.uri, s3)
        fs, path = storage.filesystem(claim.uri, s3)
        try:
            if not storage.is_remote(claim.uri):
                fs.makedirs(path, exist_ok=True)
            fs.pipe_file(posixpath.join(path, MARKER), marker)
        except OSError as exc:  # e.g. a bucket that does not exist: say where
            raise PrepError(f"cannot write to {claim.uri} ({type(exc).__name__}: {one_line(exc, limit=200)})") from None
    return claims


def _clear_leftovers(uri: str, s3: storage.S3Options | None) -> None:
    """Deletes the Lance folders of a job that died before its commit (checked by :func:`inspect_output`)."""
    fs, path = storage.filesystem(uri, s3)
    for name in _LANCE_ENTRIES:
        target = posixpath.join(path, name)
        if fs.exists(target):
            fs.rm(target, recursive=True)
