"""The job marker ``_prep_job.json``: its one typed form, its one strict parser.

A marker says prep wrote the folder it sits in (a prepared table, a materialized
output), so a rerun may clear what a dead run left and ``--overwrite`` may replace it
(:mod:`prep.io.claims` writes it and reads its presence, by the rules of
:mod:`prep.contracts.ownership`). A materialized output's marker also names the plan it was
claimed for (``fingerprint``, ``plan`` and the pinned ``source``), so a rerun of another plan
is refused before anything is written (:func:`prep.materialize.run.claim`). Examples:
prep/contracts/README.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

import prep
from prep.errors import PrepError
from prep.plan.spec import PlanSpec

__all__ = ["JOB_MARKER", "JobMarker", "PinnedSource"]

JOB_MARKER = "_prep_job.json"
_WRITTEN_BY = "prep"
_STAMP = ("written_by", "prep_version", "job", "claimed")
_PLANNED = ("fingerprint", "plan", "source")  # a materialized output's: all three or none
_FINGERPRINT = re.compile(r"^[0-9a-f]{16}$")


@dataclass(frozen=True)
class PinnedSource:
    """The (first) source table a materialized output was claimed for, at the version it was pinned to."""

    uri: str
    version: int


@dataclass(frozen=True, kw_only=True)
class JobMarker:
    """Who claimed a folder, and for a materialized output which plan.

    Args:
        job: the command that claimed it (``prep pretokenize``, ``prep materialize-shuffle``, ...).
        prep_version: the prep that wrote it.
        claimed: when (ISO 8601, UTC).
        fingerprint, plan, source: a materialized output's plan fingerprint, plan and pinned
            source table; None for a table's marker.
    """

    job: str
    prep_version: str
    claimed: str
    fingerprint: str | None = None
    plan: PlanSpec | None = None
    source: PinnedSource | None = None

    def __post_init__(self) -> None:
        if len({self.fingerprint is None, self.plan is None, self.source is None}) != 1:
            raise PrepError(f"job marker of {self.job}: fingerprint, plan and source are all given or none")

    @classmethod
    def now(cls, job: str, *, fingerprint: str | None = None, plan: PlanSpec | None = None,
            source: PinnedSource | None = None) -> JobMarker:
        """The marker ``job`` writes now, with this prep's version."""
        return cls(job=job, prep_version=prep.__version__, claimed=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                   fingerprint=fingerprint, plan=plan, source=source)

    def to_json(self) -> dict[str, Any]:
        """The JSON form :meth:`from_json` reads (a table's marker has no plan keys)."""
        doc: dict[str, Any] = {"written_by": _WRITTEN_BY, "prep_version": self.prep_version, "job": self.job,
                               "claimed": self.claimed}
        if self.plan is not None and self.source is not None:  # all three (checked on construction)
            doc.update(fingerprint=self.fingerprint, plan=self.plan.to_json(),
                       source={"uri": self.source.uri, "version": self.source.version})
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str) -> JobMarker:
        """The marker in ``doc`` (parsed JSON); strict.

        >>> JobMarker.from_json({"written_by": "prep", "prep_version": "0.1.0", "job": "prep pretokenize",
        ...                      "claimed": "2026-12-01T16:05:03+00:00"}, "t/_prep_job.json").job
        'prep pretokenize'
        >>> JobMarker.from_json({"written_by": "prep", "job": "prep pretokenize"}, "t/_prep_job.json")
        Traceback (most recent call last):
        prep.errors.PrepError: t/_prep_job.json: job marker: missing keys ['prep_version', 'claimed'], unknown keys []

        Raises:
            PrepError: one line naming ``where`` and the first bad key.
        """
        if not isinstance(doc, Mapping):
            raise PrepError(f"{where}: job marker must be a JSON object, not {type(doc).__name__}")
        missing = [k for k in _STAMP if k not in doc]
        unknown = sorted(set(doc) - set(_STAMP) - set(_PLANNED))
        if missing or unknown:
            raise PrepError(f"{where}: job marker: missing keys {missing}, unknown keys {unknown}")
        if doc["written_by"] != _WRITTEN_BY:
            raise PrepError(f"{where}: job marker: written_by={doc['written_by']!r} must be {_WRITTEN_BY!r}")
        for key in ("prep_version", "job", "claimed"):
            if not isinstance(doc[key], str) or not doc[key]:
                raise PrepError(f"{where}: job marker: {key}={doc[key]!r} must be a non-empty string")
        given = [k for k in _PLANNED if k in doc]
        if not given:
            return cls(job=doc["job"], prep_version=doc["prep_version"], claimed=doc["claimed"])
        if len(given) != len(_PLANNED):
            raise PrepError(f"{where}: job marker: {_PLANNED} are all given (a materialized output) or none; "
                            f"found only {given}")
        if not isinstance(doc["fingerprint"], str) or not _FINGERPRINT.match(doc["fingerprint"]):
            raise PrepError(f"{where}: job marker: fingerprint={doc['fingerprint']!r} must be 16 hex digits")
        try:
            plan = PlanSpec.from_json(doc["plan"])
        except PrepError as exc:
            raise PrepError(f"{where}: job marker: {exc}") from None
        source = doc["source"]
        if not (isinstance(source, Mapping) and set(source) == {"uri", "version"} and isinstance(source["uri"], str)
                and isinstance(source["version"], int) and not isinstance(source["version"], bool) and source["version"] >= 1):
            raise PrepError(f"{where}: job marker: source={source!r} must be {{\"uri\": <table>, \"version\": <integer >= 1>}}")
        return cls(job=doc["job"], prep_version=doc["prep_version"], claimed=doc["claimed"],
                   fingerprint=doc["fingerprint"], plan=plan, source=PinnedSource(source["uri"], source["version"]))
