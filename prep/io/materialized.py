"""Reading and writing a materialized output's contract files: its manifest and its done records.

The records and their strict parsers are :mod:`prep.contracts.manifest` and :mod:`prep.contracts.done`;
both files are written atomically (readers see no file, the old one or the whole new one).
"""

from __future__ import annotations

from prep.contracts.done import DoneRecord, done_path, parse_done
from prep.contracts.manifest import MANIFEST, RERUN, Manifest
from prep.contracts.marker import JOB_MARKER
from prep.errors import PrepError
from prep.io import storage
from prep.io.jsonfile import read_json_file

__all__ = ["read_manifest", "write_manifest", "read_done", "write_done"]


def read_manifest(path: str, s3: storage.S3Options | None = None) -> Manifest:
    """The checked manifest of the materialized output at ``path`` (a directory, local or ``s3://``).

    Raises:
        PrepError: no manifest (with a hint of what ``path`` is instead), or one that
            breaks the format; one line naming the file.
    """
    uri = storage.join(path, MANIFEST)
    if not storage.exists(uri, s3):
        if storage.exists(storage.join(path, "_versions"), s3):  # before the marker: a prepared table has one too
            raise PrepError(f"{path} is a prepared Lance table, not a materialized output (no {MANIFEST}): read it "
                            "through an on-the-fly plan (ReaderDataset(path, ...) or plan=...), or materialize it with "
                            f"`prep materialize-shuffle --table {path} --output DIR`")
        hint = ""
        if storage.exists(storage.join(path, JOB_MARKER), s3):
            hint = " (a run was started there but has not finished: rerun it)"
        raise PrepError(
            f"{path} is not a materialized output: no {MANIFEST}{hint}; run `prep materialize-shuffle --output {path}` "
            "(the manifest is written last, so a crashed run has none)"
        )
    return Manifest.from_json(read_json_file(uri, s3, RERUN), uri)


def write_manifest(path: str, manifest: Manifest, s3: storage.S3Options | None = None) -> None:
    """Writes ``path/manifest.json`` atomically (readers see the old one or the whole new one)."""
    storage.write_json_atomic(storage.join(path, MANIFEST), manifest.to_json(), s3)


def read_done(output: str, epoch: int, split: int, s3: storage.S3Options | None = None) -> DoneRecord | None:
    """The done record of (epoch, split) under ``output``; None when there is none.

    Raises:
        PrepError: a record that does not parse, one line naming the file.
    """
    uri = storage.join(output, done_path(epoch, split))
    if not storage.exists(uri, s3):
        return None
    try:
        return parse_done(storage.read_json(uri, s3))
    except (PrepError, ValueError) as exc:  # a bad key, or not JSON at all (a torn write of an old prep)
        raise PrepError(f"{uri}: {exc}") from None


def write_done(output: str, record: DoneRecord, s3: storage.S3Options | None = None) -> None:
    """Writes the record atomically (readers see no record or the whole record)."""
    storage.write_json_atomic(storage.join(output, done_path(record.epoch, record.split)), record.to_json(), s3)
