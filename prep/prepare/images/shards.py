"""WebDataset tar shards: ``key.jpg`` + ``key.cls`` / ``key.json`` members, one shard per chunk.

Members are grouped by key as WebDataset does (the key is the member path up to the
first dot of its base name; the rest is the extension). A sample's image is its first
member whose extension is in :data:`IMAGE_EXTENSIONS` (in that order of preference);
its label is the text of ``.cls`` (an integer or a class name), else the label
field of ``.json``. The shard is streamed, never extracted to disk. A shard that
ends mid-member keeps the samples read before the damage and adds a file-level reject.
"""

from __future__ import annotations

import json
import re
import tarfile
from dataclasses import dataclass
from typing import Any, Iterator

from prep.io import storage
from prep.prepare.ids import key_hash
from prep.prepare.listing import dangling_link
from prep.prepare.images.samples import Sample
from prep.prepare.rejects import Reject

__all__ = ["TarChunk", "read_tar", "IMAGE_EXTENSIONS"]

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff", "ppm", "pgm", "img")
_KEY = re.compile(r"^((?:.*/|)[^./][^./]*)\.([^/]*)$")


@dataclass(frozen=True)
class TarChunk:
    """One tar shard; ``key`` is its path relative to the input root (ids derive from it)."""

    uri: str
    key: str

    def __str__(self) -> str:
        return self.uri


def _label(members: dict[str, tuple[str, bytes]], label_field: str | None) -> tuple[Any, str | None]:
    """``(raw label, problem)`` from ``.cls`` or ``.json``."""
    if label_field is None:
        return None, None
    if "cls" in members:
        text = members["cls"][1].decode("utf-8", "replace").strip()
        if not text:
            return None, None
        return (int(text) if text.lstrip("-").isdigit() else text), None
    if "json" in members:
        try:
            meta = json.loads(members["json"][1])
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return None, f"{members['json'][0]}: malformed JSON ({exc})"
        return (meta.get(label_field) if isinstance(meta, dict) else None), None
    return None, None


def _sample(chunk: TarChunk, key: str, members: dict[str, tuple[str, bytes]], label_field: str | None) -> Sample | Reject:
    ext = next((e for e in IMAGE_EXTENSIONS if e in members), None)
    if ext is None:
        found = ", ".join(sorted(members))
        return Reject(chunk.uri, f"member {key}.*", f"sample '{key}' has no image member (found: {found}; want one of {', '.join(IMAGE_EXTENSIONS)})")
    name, data = members[ext]
    label, problem = _label(members, label_field)
    if problem:
        return Reject(chunk.uri, f"member {name}", problem)
    return Sample(data, f"{chunk.uri}#{name}", chunk.key, key_hash(key), label, chunk.uri, f"member {name}")


def read_tar(chunk: TarChunk, s3: storage.S3Options | None, label_field: str | None = "label") -> Iterator[Sample | Reject]:
    """Yields one sample (or reject) per member key, in archive order."""
    fs, path = storage.filesystem(chunk.uri, s3)
    dangling = dangling_link(chunk.uri)
    if dangling is not None:  # listed so that it is counted, not skipped unseen
        yield Reject(chunk.uri, "file", dangling)
        return
    with fs.open(path, "rb") as f:
        try:
            tar = tarfile.open(fileobj=f, mode="r|*")
        except (tarfile.TarError, EOFError, OSError) as exc:
            yield Reject(chunk.uri, "file", f"not a readable tar archive: {exc}")
            return
        key, members, seen = None, {}, 0
        try:
            for member in tar:
                if not member.isfile():
                    continue
                m = _KEY.match(member.name)
                mkey, ext = (m.group(1), m.group(2).lower()) if m else (member.name, "")
                if key is not None and mkey != key:
                    yield _sample(chunk, key, members, label_field)
                    members = {}
                key = mkey
                handle = tar.extractfile(member)
                members[ext] = (member.name, handle.read() if handle else b"")
                seen += 1
        except (tarfile.TarError, EOFError, OSError) as exc:
            if members:
                yield _sample(chunk, key, members, label_field)
            yield Reject(chunk.uri, "file", f"tar archive truncated or corrupt after {seen} members: {exc}")
            return
        if members:
            yield _sample(chunk, key, members, label_field)
