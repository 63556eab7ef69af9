"""The checksums of a prepared table's files: their one typed form, their one strict parser.

A Lance data file (and a deletion file) is never rewritten once committed: a new version
adds files and drops others. So each file is checksummed once, when the commit that adds
it is made, and the record of every file a version holds goes into that version's schema
metadata under :data:`CHECKSUMS_KEY`, in the same commit as the files (no version without
its record, no record without its version). A version that grows a table carries the
digests of the files it keeps from the version before and adds those of its new files, so
only new bytes are read at a commit. ``prep verify TABLE`` and materialize read every file
of a version again and compare (:mod:`prep.io.table_checksums`). Its example is
prep/contracts/README.md's (the one place each on-disk file's example is written).

Paths are relative to the table folder; a digest is the sha256 of the file's bytes (hex).
About 100 bytes a file in every version's manifest: a table of 10,000 data files carries
1 MB. The rejects table carries none (no stage reads it as data).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from prep.errors import PrepError

__all__ = ["CHECKSUMS_KEY", "CHECKSUMS_FORMAT", "FileChecksum", "TableChecksums", "parse_checksums",
           "encode_checksums", "read_checksums"]

CHECKSUMS_KEY = b"prep.files"
CHECKSUMS_FORMAT = "prep.files/1"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, kw_only=True)
class FileChecksum:
    """One file of a table version: its size in bytes and the sha256 of its bytes (hex)."""

    size: int
    sha256: str


@dataclass(frozen=True, kw_only=True)
class TableChecksums:
    """Every file of one table version (path relative to the table folder) and its checksum.

    >>> c = TableChecksums(files={"data/a.lance": FileChecksum(size=3, sha256="0" * 64)})
    >>> parse_checksums(c.to_json()) == c
    True
    """

    files: Mapping[str, FileChecksum]

    def to_json(self) -> dict[str, Any]:
        return {"format": CHECKSUMS_FORMAT, "algorithm": "sha256",
                "files": {path: [c.size, c.sha256] for path, c in sorted(self.files.items())}}


def parse_checksums(doc: Any, where: str = "table checksums") -> TableChecksums:
    """The record in ``doc`` (parsed JSON); strict.

    Raises:
        PrepError: one line naming ``where`` and the first bad key or file.
    """
    if not isinstance(doc, dict) or set(doc) != {"format", "algorithm", "files"}:
        raise PrepError(f"{where}: must be an object with keys format, algorithm, files; got "
                        f"{sorted(doc) if isinstance(doc, dict) else type(doc).__name__}")
    if doc["format"] != CHECKSUMS_FORMAT or doc["algorithm"] != "sha256":
        raise PrepError(f"{where}: format={doc['format']!r} algorithm={doc['algorithm']!r}, expected "
                        f"{CHECKSUMS_FORMAT!r} and 'sha256' (written by a newer prep? upgrade prep)")
    if not isinstance(doc["files"], dict):
        raise PrepError(f"{where}: files must map each file to [size, sha256]")
    files = {}
    for path, entry in doc["files"].items():
        ok = (isinstance(path, str) and path and isinstance(entry, list) and len(entry) == 2
              and isinstance(entry[0], int) and not isinstance(entry[0], bool) and entry[0] >= 0
              and isinstance(entry[1], str) and _SHA256.match(entry[1]))
        if not ok:
            raise PrepError(f"{where}: files[{path!r}]={entry!r} must be [size >= 0, 64 hex digits]")
        files[path] = FileChecksum(size=entry[0], sha256=entry[1])
    return TableChecksums(files=files)


def encode_checksums(checksums: TableChecksums) -> dict[bytes, bytes]:
    """The Lance schema metadata entry for ``checksums``."""
    return {CHECKSUMS_KEY: json.dumps(checksums.to_json(), separators=(",", ":")).encode()}


def read_checksums(schema_metadata: Mapping[bytes, bytes] | None, where: str) -> TableChecksums | None:
    """The record in a table version's schema metadata; None when it has none (written before prep
    recorded checksums, or not by prep).

    Raises:
        PrepError: the entry is there but is not JSON or breaks the contract, naming ``where``.
    """
    raw = (schema_metadata or {}).get(CHECKSUMS_KEY)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        raise PrepError(f"{where}: its file checksums ({CHECKSUMS_KEY.decode()} in the schema metadata) are not "
                        "valid JSON; prepare the table anew with --overwrite") from None
    return parse_checksums(doc, f"{where}: file checksums")
