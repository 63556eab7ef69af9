"""The cache marker ``_prep_cache.json``: its one typed form, its one strict parser.

A reader cache (``prep prewarm --cache``, ``prep read --cache-dir``) is claimed with it
before anything else is written there: it says prep wrote the folder (so ``--overwrite``
may replace the cache's own files, :func:`prep.io.claims.remove_owned`) and which
materialization the copies are of (``source`` and its manifest's ``fingerprint``), so a
cache of another materialization is refused, never read (:mod:`prep.cache.claim`). Its example
is prep/contracts/README.md's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

import prep
from prep.errors import PrepError

__all__ = ["CACHE_MARKER", "CACHE_JOB", "CacheMarker"]

CACHE_MARKER = "_prep_cache.json"
CACHE_JOB = "prep prewarm"  # the one writer's name: prewarm and the reader share one cache layout
_WRITTEN_BY = "prep"
_KEYS = ("written_by", "prep_version", "job", "claimed", "source", "fingerprint")
_FINGERPRINT = re.compile(r"^[0-9a-f]{16}$")


@dataclass(frozen=True, kw_only=True)
class CacheMarker:
    """Whose cache a folder is: the materialization (``source``, ``fingerprint``) its copies are of.

    Args:
        source: the materialized output the copies come from (local path or URI).
        fingerprint: that output's manifest fingerprint (16 hex digits).
        prep_version: the prep that claimed the cache.
        claimed: when (ISO 8601, UTC).
    """

    source: str
    fingerprint: str
    prep_version: str
    claimed: str

    @classmethod
    def now(cls, *, source: str, fingerprint: str) -> CacheMarker:
        """The marker a cache of ``source`` gets now, with this prep's version."""
        return cls(source=source, fingerprint=fingerprint, prep_version=prep.__version__,
                   claimed=datetime.now(timezone.utc).isoformat(timespec="seconds"))

    def to_json(self) -> dict[str, Any]:
        """The JSON form :meth:`from_json` reads."""
        return {"written_by": _WRITTEN_BY, "prep_version": self.prep_version, "job": CACHE_JOB, "claimed": self.claimed,
                "source": self.source, "fingerprint": self.fingerprint}

    @classmethod
    def from_json(cls, doc: Any, where: str) -> CacheMarker:
        """The marker in ``doc`` (parsed JSON); strict: every key, no other, each of its type.

        >>> CacheMarker.from_json({"written_by": "prep", "prep_version": "0.1.0", "job": "prep prewarm",
        ...     "claimed": "2026-12-01T16:05:03+00:00", "source": "/out", "fingerprint": "5a396cc6ece2d6c3"},
        ...     "c/_prep_cache.json").source
        '/out'
        >>> CacheMarker.from_json({"written_by": "prep", "job": "prep prewarm"}, "c/_prep_cache.json")
        Traceback (most recent call last):
        prep.errors.PrepError: c/_prep_cache.json: cache marker: missing keys ['prep_version', 'claimed', 'source', 'fingerprint'], unknown keys []

        Raises:
            PrepError: one line naming ``where`` and the first bad key.
        """
        if not isinstance(doc, Mapping):
            raise PrepError(f"{where}: cache marker must be a JSON object, not {type(doc).__name__}")
        missing = [k for k in _KEYS if k not in doc]
        unknown = sorted(set(doc) - set(_KEYS))
        if missing or unknown:
            raise PrepError(f"{where}: cache marker: missing keys {missing}, unknown keys {unknown}")
        if doc["written_by"] != _WRITTEN_BY or doc["job"] != CACHE_JOB:
            raise PrepError(f"{where}: cache marker: written_by={doc['written_by']!r}, job={doc['job']!r} "
                            f"must be {_WRITTEN_BY!r}, {CACHE_JOB!r}")
        for key in ("prep_version", "claimed", "source"):
            if not isinstance(doc[key], str) or not doc[key]:
                raise PrepError(f"{where}: cache marker: {key}={doc[key]!r} must be a non-empty string")
        if not isinstance(doc["fingerprint"], str) or not _FINGERPRINT.match(doc["fingerprint"]):
            raise PrepError(f"{where}: cache marker: fingerprint={doc['fingerprint']!r} must be 16 hex digits")
        return cls(source=doc["source"], fingerprint=doc["fingerprint"], prep_version=doc["prep_version"],
                   claimed=doc["claimed"])
