"""The plan spec: the one typed, validated description of a shuffle plan.

A :class:`PlanSpec` is what ``prep materialize-shuffle`` is asked to do, what its
manifest records under ``plan``, what ``prep verify`` recomputes and what the
reader's on-the-fly plan (:class:`prep.reader.layouts.planned.Planned`) reads by. It is
built and checked here only; everyone else receives the object. Its JSON form
(:meth:`PlanSpec.to_json`) is the manifest's ``plan`` block, and its fingerprint
(:meth:`PlanSpec.fingerprint`) ties an output, a reader state and a done record
to (source uri, source version, plan).

``mixture`` (a :class:`MixtureSpec`) makes it a weighted multi-table plan
(:mod:`prep.plan.mixture`, docs/materialize.md "Mixtures"); it is left out of the
JSON form while it is ``None``, so single-table fingerprints stay what they were.

>>> spec = PlanSpec(num_splits=4, seed=3)
>>> PlanSpec.from_json(spec.to_json()) == spec
True
>>> spec.fingerprint("t.lance", 1) == PlanSpec(seed=3, num_splits=4).fingerprint("t.lance", 1)
True
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import MISSING, dataclass, fields
from typing import Any, Literal, Mapping

from prep.errors import PrepError
from prep.plan import STRATEGIES, validate

__all__ = ["PlanSpec", "MixtureSpec", "MixtureSource", "DEFAULT_SPLITS", "WEIGHT_UNITS", "MAX_WEIGHT"]

DEFAULT_SPLITS = 48  # world sizes 1, 2, 3, 4, 6, 8, 12, 16, 24 and 48 can read it
# Weights are relative; any scale up to 1e15 (token counts, say) sums without overflow over 65535 sources.
MAX_WEIGHT = 1e15


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_written(value: Any) -> str:
    """How to write a number that YAML read as text (YAML 1.1 reads ``1e-3`` as a string), for an error.

    >>> _as_written("1e-3")
    " (read as the string '1e-3': YAML reads 1e-3 as text; write 1.0e-3)"
    >>> _as_written("16")
    " (read as the string '16': write it without quotes, 16)"
    >>> _as_written(3)
    ''
    """
    if not isinstance(value, str):
        return ""
    try:
        float(value)
    except ValueError:
        return " (a string)"
    text = value.strip().lower()
    if "e" not in text or "inf" in text or "nan" in text:
        return f" (read as the string {value!r}: write it without quotes, {value.strip()})"
    mantissa, exponent = text.split("e", 1)
    mantissa = mantissa if "." in mantissa else f"{mantissa}.0"
    return f" (read as the string {value!r}: YAML reads {value.strip()} as text; write " \
           f"{mantissa}e{exponent if exponent[:1] in '+-' else '+' + exponent})"


def _filter(value: Any, key: str) -> None:
    """A Lance SQL filter: a non-empty string holding one expression (Lance reads up to a ``;`` and drops the rest).

    >>> _filter("name = 'a;b'", "plan.filter")
    >>> _filter("length > 300; drop", "plan.filter")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    prep.errors.PrepError: plan.filter='length > 300; drop' must be one SQL expression: Lance would read 'length > 300' ...
    """
    if not (isinstance(value, str) and value.strip()):
        raise PrepError(f"{key}={value!r} must be a non-empty Lance SQL string or null")
    quote = None
    for i, ch in enumerate(value):
        if quote:  # inside '...' or "..." (a doubled quote closes and reopens: same result)
            quote = None if ch == quote else quote
        elif ch in "'\"`":
            quote = ch
        elif ch == ";" and value[i + 1:].strip():
            raise PrepError(f"{key}={value!r} must be one SQL expression: Lance would read {value[:i].strip()!r} and "
                            f"ignore {value[i:]!r}; remove the ';' (join conditions with AND/OR)")


def _number(value: Any, key: str, rule: str, ok: bool) -> None:
    """Raises unless ``ok``: one line naming ``key``, the value, the rule, and how to write it if YAML read it as text."""
    if not ok:
        raise PrepError(f"{key}={value!r} must be {rule}{_as_written(value)}")


def _names(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise PrepError(f"plan.{key}={value!r} must be a list of column names")


def _strict(cls: type, doc: Any, key: str) -> dict[str, Any]:
    """``doc`` as keyword arguments of ``cls``: an object with only its fields (one-line error naming ``key``)."""
    if not isinstance(doc, Mapping):
        raise PrepError(f"{key} must be a JSON object, not {type(doc).__name__}")
    unknown = sorted(set(doc) - {f.name for f in fields(cls)})
    if unknown:
        raise PrepError(f"{key} has unknown keys {unknown}; known: {sorted(f.name for f in fields(cls))}")
    missing = [f.name for f in fields(cls) if f.default is MISSING and f.name not in doc]
    if missing:
        raise PrepError(f"{key} is missing keys {missing}")
    return dict(doc)


WEIGHT_UNITS = ("rows", "tokens")


@dataclass(frozen=True, kw_only=True)
class MixtureSource:
    """One table of a mixture.

    Args:
        table: the prepared Lance table (local path or ``s3://``).
        weight: its share relative to the other sources' weights (> 0).
        version: the table version the plan runs over (None until materialize pins it).
        filter: Lance SQL filter selecting its rows (default: all rows).
        columns: columns to write (default: all of the table's); every source must end up with the same.
        max_repeats: the most times an epoch may go through its rows (default: no limit).
    """

    table: str
    weight: float
    version: int | None = None
    filter: str | None = None
    columns: tuple[str, ...] | None = None
    max_repeats: float | None = None

    def __post_init__(self) -> None:
        key = f"plan.mixture.sources[{self.table!r}]"
        if not isinstance(self.table, str) or not self.table:
            raise PrepError(f"plan.mixture.sources: table={self.table!r} must be a table path")
        _number(self.weight, f"{key}.weight", f"a finite number > 0 and <= {MAX_WEIGHT:g}",
                not isinstance(self.weight, bool) and isinstance(self.weight, (int, float))
                and math.isfinite(self.weight) and 0 < self.weight <= MAX_WEIGHT)
        if self.version is not None and not (_is_int(self.version) and self.version >= 1):
            raise PrepError(f"{key}.version={self.version!r} must be an integer >= 1")
        if self.filter is not None:
            _filter(self.filter, f"{key}.filter")
        if self.columns is not None:
            object.__setattr__(self, "columns", _names(self.columns, f"mixture.sources[{self.table!r}].columns") or None)
        if self.max_repeats is not None:
            _number(self.max_repeats, f"{key}.max_repeats", "a finite number > 0",
                    not isinstance(self.max_repeats, bool) and isinstance(self.max_repeats, (int, float))
                    and math.isfinite(self.max_repeats) and self.max_repeats > 0)

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "weight": self.weight, "version": self.version, "filter": self.filter,
                "columns": list(self.columns) if self.columns is not None else None, "max_repeats": self.max_repeats}


@dataclass(frozen=True, kw_only=True)
class MixtureSpec:
    """A weighted mixture of tables (:mod:`prep.plan.mixture` says what each position holds).

    Args:
        sources: the tables, in order (the ``source`` column holds the index).
        weight_by: ``rows`` or ``tokens``: what the weights are shares of (stated, never assumed).
        global_batch: ``G``; each run of ``G`` rows holds the proportions; readers' global batch
            sizes must be multiples of it.
        epoch_rows: rows per epoch, a multiple of ``G`` and of ``lcm(G, S)`` in a plan of ``S``
            splits (materialize fills it in from
            ``epoch_tokens``, or from the sources' rows when neither is given).
        epoch_tokens: the epoch size asked for in tokens (converted to rows, see ``epoch_rows``).
    """

    sources: tuple[MixtureSource, ...]
    weight_by: Literal["rows", "tokens"]
    global_batch: int
    epoch_rows: int | None = None
    epoch_tokens: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.sources, (list, tuple)) or not self.sources:
            raise PrepError("plan.mixture.sources must list at least one source")
        srcs = tuple(s if isinstance(s, MixtureSource) else MixtureSource(**_strict(MixtureSource, s, "plan.mixture.sources[]"))
                     for s in self.sources)
        object.__setattr__(self, "sources", srcs)
        if len(srcs) > 65535:
            raise PrepError(f"plan.mixture has {len(srcs)} sources; at most 65535 fit the uint16 source column")
        if self.weight_by not in WEIGHT_UNITS:
            raise PrepError(f"plan.mixture.weight_by={self.weight_by!r} must be one of {list(WEIGHT_UNITS)}")
        _number(self.global_batch, "plan.mixture.global_batch", "an integer >= 1",
                _is_int(self.global_batch) and self.global_batch >= 1)
        for key in ("epoch_rows", "epoch_tokens"):
            value = getattr(self, key)
            if value is not None:
                _number(value, f"plan.mixture.{key}", "an integer >= 1", _is_int(value) and value >= 1)
        if self.epoch_rows is not None and self.epoch_rows % self.global_batch:
            raise PrepError(f"plan.mixture.epoch_rows={self.epoch_rows} must be a multiple of global_batch={self.global_batch}")

    def to_json(self) -> dict[str, Any]:
        return {"sources": [s.to_json() for s in self.sources], "weight_by": self.weight_by,
                "global_batch": self.global_batch, "epoch_rows": self.epoch_rows, "epoch_tokens": self.epoch_tokens}

    @classmethod
    def from_json(cls, doc: Any) -> "MixtureSpec":
        return cls(**_strict(cls, doc, "plan.mixture"))


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
        mixture: a weighted multi-table plan (:class:`MixtureSpec`), or None for one table.
            Its sources carry their own filter and columns, so ``filter`` and ``columns``
            stay None, and the strategy is ``random`` (each source's stream is shuffled).

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
    mixture: MixtureSpec | None = None

    def __post_init__(self) -> None:
        for key in ("num_splits", "clump", "seed"):
            _number(getattr(self, key), f"plan.{key}", "an integer", _is_int(getattr(self, key)))
        if not isinstance(self.strategy, str):
            raise PrepError(f"plan.strategy={self.strategy!r} must be one of {sorted(STRATEGIES)}")
        validate(num_rows=0, num_splits=self.num_splits, strategy=self.strategy, seed=self.seed, clump=self.clump)
        object.__setattr__(self, "hash_columns", _names(self.hash_columns, "hash_columns"))
        if self.strategy == "hash" and not self.hash_columns:
            raise PrepError("plan.hash_columns must name at least one column for strategy hash")
        if self.filter is not None:
            _filter(self.filter, "plan.filter")
        if self.columns is not None:
            object.__setattr__(self, "columns", _names(self.columns, "columns") or None)
        if self.mixture is not None:
            if not isinstance(self.mixture, MixtureSpec):
                raise PrepError(f"plan.mixture={self.mixture!r} must be a MixtureSpec (PlanSpec.from_json reads its JSON form)")
            if self.strategy != "random" or self.filter is not None or self.columns is not None:
                raise PrepError("plan.mixture: strategy must be 'random' and filter/columns null (each source has its own)")
            unit = math.lcm(self.mixture.global_batch, self.num_splits)
            rows = self.mixture.epoch_rows
            if rows is not None and rows % unit:
                near = sorted({max(unit, rows // unit * unit), -(-rows // unit) * unit})
                raise PrepError(f"plan.mixture.epoch_rows={rows} must be a multiple of {unit}, the least common multiple "
                                f"of global_batch={self.mixture.global_batch} and num_splits={self.num_splits} (so "
                                f"every split holds the same rows): use {' or '.join(map(str, near))}, or leave "
                                "epoch_rows out")

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``plan`` block (lists, not tuples). ``mixture`` is left out while it
        is ``None``, so a single-table plan has the fingerprint it had before the field existed."""
        doc = {
            "num_splits": self.num_splits, "strategy": self.strategy, "hash_columns": list(self.hash_columns),
            "clump": self.clump, "seed": self.seed, "filter": self.filter,
            "columns": list(self.columns) if self.columns is not None else None,
        }
        if self.mixture is not None:
            doc["mixture"] = self.mixture.to_json()
        return doc

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
        mixture = doc.get("mixture")
        return cls(**{**doc, "mixture": MixtureSpec.from_json(mixture) if mixture is not None else None})

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
