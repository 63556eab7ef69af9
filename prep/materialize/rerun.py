"""Which done splits a rerun may trust: a cheap check of each, so that a rerun repairs.

A split counts as done when its done record (:mod:`prep.contracts.done`) parses,
names this run's plan, every file the record lists is there with the size it had,
and the dataset's content checksum (:mod:`prep.io.checksum`, every row read back)
is the one the record holds. Anything else (a deleted split folder, a truncated or
missing data file, bytes flipped in place, a damaged record) is logged and the split
is written again, so the plain rerun repairs whatever ``prep verify`` finds in a split.
Cost: one listing per epoch folder and one read of every done split; reading is
several times cheaper than writing a split (docs/materialize.md, "Reruns"), and the
cheap checks run first, so a split already known to be damaged is not read.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

import pyarrow as pa

from prep.contracts.done import DoneRecord, done_path
from prep.io.materialized import read_done
from prep.errors import PrepError, one_line
from prep.io import storage
from prep.io.checksum import dataset_checksum
from prep.contracts.manifest import split_path

__all__ = ["sound_done_records", "check_splits"]

log = logging.getLogger("prep.materialize")


def _listing(job: Any, epoch: int) -> dict[str, int]:
    """Every file under ``epoch-EEEEE`` (path relative to the output) and its size; empty when the folder is not there."""
    folder = split_path(epoch, 0).split("/")[0]
    fs, root = storage.filesystem(storage.join(job.output, folder), job.s3)
    root = root.rstrip("/")
    fs.invalidate_cache(root)  # what is there now, not what fsspec listed earlier in this process
    try:
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        return {}
    start = len(root) - len(folder)  # names from "epoch-EEEEE/" on
    return {name[start:]: int(info["size"]) for name, info in found.items() if info.get("type") != "directory"}


def _unsound(job: Any, record: DoneRecord, listing: dict[str, int], fingerprint: str) -> str | None:
    """Why the split of ``record`` cannot be trusted (None: it can), given the files of its epoch folder."""
    if record.fingerprint != fingerprint:
        return f"its done record is of another plan ({record.fingerprint}, expected {fingerprint})"
    for name, size in sorted(record.files.items()):
        got = listing.get(f"{record.path}/{name}")
        if got is None:
            return f"{record.path}/{name} is missing"
        if got != size:
            return f"{record.path}/{name} has {got} bytes, {size} when written"
    uri = storage.join(job.output, record.path)
    try:
        rows, checksum = dataset_checksum(uri, job.lance_options(uri))
    except (PrepError, OSError, ValueError, pa.ArrowException) as exc:
        return f"{record.path} cannot be read ({one_line(exc, limit=160)})"
    if rows != record.num_rows:
        return f"{record.path} holds {rows} rows, its done record {record.num_rows}"
    if checksum != record.checksum:
        return f"{record.path}: content checksum {checksum[:12]}... != {record.checksum[:12]}... of its done record"
    return None


def check_splits(job: Any, epoch: int, fingerprint: str) -> dict[int, DoneRecord | str]:
    """Each split of ``epoch`` that has a done record: the record when the split is whole under the plan
    ``fingerprint``, else why not (splits without a record are left out: not written yet)."""
    listing = _listing(job, epoch)
    out: dict[int, DoneRecord | str] = {}
    for s in range(job.plan.num_splits):
        if done_path(epoch, s) not in listing:
            continue
        try:
            record = read_done(job.output, epoch, s, job.s3)
        except PrepError as exc:
            out[s] = one_line(exc, limit=200)
            continue
        why = _unsound(job, record, listing, fingerprint) if record is not None else "its done record is gone"
        out[s] = record if why is None else why
    return out


def sound_done_records(job: Any, epochs: Iterable[int]) -> dict[tuple[int, int], DoneRecord]:
    """The done records of ``epochs`` whose splits are whole under this run's plan (see the module
    docstring); the others are logged."""
    done: dict[tuple[int, int], DoneRecord] = {}
    for e in epochs:
        for s, found in check_splits(job, e, job.fingerprint).items():
            if isinstance(found, DoneRecord):
                done[(e, s)] = found
            else:
                log.warning("epoch %d split %d: %s; writing it again", e, s, found)
    return done
