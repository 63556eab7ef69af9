"""The plan spec: the one typed, validated description of a shuffle plan.

A :class:`PlanSpec` is what ``prep materialize-shuffle`` is asked to do, what its
manifest records under ``plan``, what ``prep verify`` recomputes and what the
reader's on-the-fly plan (:class:`prep.reader.planned.Planned`) reads by. It is
built and checked here only; everyone else receives the object. Its JSON form
(:meth:`PlanSpec.to_json`) is the manifest's ``plan`` block, and its fingerprint
(:meth:`PlanSpec.fingerprint`) ties an output, a reader state and a done record
to (source uri, source version, plan).

``mixture`` is reserved for weighted multi-table plans: today only ``None`` is
accepted, and it is left out of the JSON form, so single-table fingerprints stay
what they were.

>>> spec = PlanSpec(num_splits=4, seed=3)
>>> PlanSpec.from_json(spec.to_json()) == spec
True
>>> spec.fingerprint("t.lance", 1) == PlanSpec(seed=3, num_splits=4).fingerprint("t.lance", 1)
True
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any, Mapping

from prep.errors import PrepError
from prep.plan import STRATEGIES, validate

__all__ = ["PlanSpec", "DEFAULT_SPLITS"]

DEFAULT_SPLITS = 48  # world sizes 1, 2, 3, 4, 6, 8, 12, 16, 24 and 48 can read it


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _names(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise PrepError(f"plan.{key}={value!r} must be a list of column names")


@dataclass(frozen=True, kw_only=True)
class PlanSpec:
    """A shuffle plan over one table (frozen; validated on construction).

    Args:
        num_splits: splits per epoch (default 48).
        strategy: one of :data:`prep.plan.STRATEGIES` (default ``random``).
        hash_columns: columns the ``hash`` strategy hashes (default ``("id",)``).
        clump: rows per shuffled block (default 1).
        seed: plan seed (default 0).
        filter: Lance SQL filter selecting the rows (default: all rows).
        columns: columns to write (default: all of the table's).
        mixture: reserved for multi-table plans; only ``None`` today.

    Raises:
        PrepError: one line naming the bad field.
    """

    num_splits: int = DEFAULT_SPLITS
    strategy: str = "random"
    hash_columns: tuple[str, ...] = ("id",)
    clump: int = 1
    seed: int = 0
    filter: str | None = None
    columns: tuple[str, ...] | None = None
    mixture: None = None

    def __post_init__(self) -> None:
        for key in ("num_splits", "clump", "seed"):
            if not _is_int(getattr(self, key)):
                raise PrepError(f"plan.{key}={getattr(self, key)!r} must be an integer")
        if not isinstance(self.strategy, str):
            raise PrepError(f"plan.strategy={self.strategy!r} must be one of {sorted(STRATEGIES)}")
        validate(num_rows=0, num_splits=self.num_splits, strategy=self.strategy, seed=self.seed, clump=self.clump)
        object.__setattr__(self, "hash_columns", _names(self.hash_columns, "hash_columns"))
        if self.strategy == "hash" and not self.hash_columns:
            raise PrepError("plan.hash_columns must name at least one column for strategy hash")
        if self.filter is not None and not (isinstance(self.filter, str) and self.filter.strip()):
            raise PrepError(f"plan.filter={self.filter!r} must be a non-empty Lance SQL string or null")
        if self.columns is not None:
            object.__setattr__(self, "columns", _names(self.columns, "columns") or None)
        if self.mixture is not None:
            raise PrepError("plan.mixture: mixtures are not supported by this prep version yet")

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``plan`` block (lists, not tuples). ``mixture`` is left out while it
        is ``None``, so a single-table plan has the fingerprint it had before the field existed."""
        return {
            "num_splits": self.num_splits, "strategy": self.strategy, "hash_columns": list(self.hash_columns),
            "clump": self.clump, "seed": self.seed, "filter": self.filter,
            "columns": list(self.columns) if self.columns is not None else None,
        }

    @classmethod
    def from_json(cls, doc: Any, *, fill_defaults: bool = False) -> "PlanSpec":
        """The spec of a ``plan`` block; strict: an unknown key, a missing key (unless
        ``fill_defaults``) or a wrong type is a one-line PrepError naming ``plan.KEY``.

        >>> PlanSpec.from_json({"num_splits": 4}, fill_defaults=True).strategy
        'random'
        """
        if not isinstance(doc, Mapping):
            raise PrepError(f"plan must be a JSON object, not {type(doc).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise PrepError(f"plan has unknown keys {unknown}; known: {sorted(known)}")
        missing = sorted(known - set(doc) - {"mixture"})
        if missing and not fill_defaults:
            raise PrepError(f"plan is missing keys {missing}")
        return cls(**doc)

    def fingerprint(self, source_uri: str, source_version: int) -> str:
        """16 hex chars: sha256 of the canonical JSON of source uri, version and this plan.

        >>> len(PlanSpec().fingerprint("t.lance", 1))
        16
        """
        canonical = json.dumps(
            {"source_uri": source_uri, "source_version": int(source_version), "plan": self.to_json()},
            sort_keys=True, separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def split_args(self) -> dict[str, Any]:
        """The keyword arguments :mod:`prep.plan`'s functions take from the plan (add ``num_rows``)."""
        return {"num_splits": self.num_splits, "strategy": self.strategy, "seed": self.seed, "clump": self.clump}
