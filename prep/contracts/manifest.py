"""The manifest of a materialized output: its one typed form and its one strict reader.

``OUT/manifest.json`` (format :data:`FORMAT`, docs/architecture.md, "Materialized
epochs") is written last by ``prep materialize-shuffle`` and is the only thing
verify, prewarm and the reader trust: the plan (:class:`prep.plan.spec.PlanSpec`),
the source table and version, and every (epoch, split) dataset with its rows and
content checksum. A single table's epochs each record the table version they drew
from and the rows selected there (an output extended onto a grown table with
``--extend`` holds epochs of several versions; ``source`` is the newest of them, and
``fingerprint``, which reader states and caches name, stays the one of the version the
output started on). A mixture's manifest also lists its tables
(:class:`MixtureTable`, versions pinned once, with the rows available, the most an epoch drew and
the repeats that makes) and, per epoch, the rows and tokens each source got (counted in the data
written); a single-table manifest has neither key.
:meth:`Manifest.from_json` is the only parser (it also reads :data:`FORMAT_V1`, whose epochs
all drew from ``source.version``; :func:`prep.io.materialized.read_manifest` reads the file);
anything wrong is one line naming the file and the first bad key, and telling to re-run materialize.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from prep.errors import PrepError
from prep.contracts.table import TableMetadata
from prep.plan.spec import PlanSpec

__all__ = ["FORMAT", "FORMAT_V1", "MANIFEST", "SplitFile", "Epoch", "Source", "MixtureTable", "Manifest", "RERUN", "split_path", "vocab_size"]

FORMAT = "prep.materialized/2"
FORMAT_V1 = "prep.materialized/1"  # still read: no per-epoch version (every epoch drew from source.version)
MANIFEST = "manifest.json"
RERUN = "rerun `prep materialize-shuffle` to rewrite it"
_FINGERPRINT = re.compile(r"^[0-9a-f]{16}$")
_KEYS = ("format", "prep_version", "fingerprint", "source", "plan", "num_selected_rows", "columns", "epochs")
_OPTIONAL = ("mixture",)  # only in a mixture's manifest


def split_path(epoch: int, split: int) -> str:
    """Relative path of one (epoch, split) dataset.

    >>> split_path(2, 17)
    'epoch-00002/split-00017.lance'
    """
    return f"epoch-{epoch:05d}/split-{split:05d}.lance"


def _int(value: Any, minimum: int = 0) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


@dataclass(frozen=True, kw_only=True)
class SplitFile:
    """One (epoch, split) dataset: ``path`` relative to the output, its rows and content checksum."""

    split: int
    path: str
    num_rows: int
    checksum: str


@dataclass(frozen=True, kw_only=True)
class Epoch:
    """One materialized epoch: its splits, ``splits[s].split == s``; the table version it drew from
    and the rows selected there (None: the manifest's ``source.version`` and ``num_selected_rows``,
    filled in by :class:`Manifest`); for a mixture, the rows and tokens of each source in it
    (``source_rows[i]``, ``source_tokens[i]``), else None."""

    epoch: int
    splits: tuple[SplitFile, ...]
    source_rows: tuple[int, ...] | None = None
    source_tokens: tuple[int, ...] | None = None
    version: int | None = None
    num_selected_rows: int | None = None

    def to_json(self, per_version: bool = True) -> dict[str, Any]:
        doc: dict[str, Any] = {"epoch": self.epoch}
        if per_version:  # a single table's epoch (a mixture pins its tables' versions once, in ``mixture``)
            doc.update(version=self.version, num_selected_rows=self.num_selected_rows)
        doc["splits"] = [{"split": s.split, "path": s.path, "num_rows": s.num_rows, "checksum": s.checksum}
                         for s in self.splits]
        if self.source_rows is not None:
            doc["sources"] = {"rows": list(self.source_rows), "tokens": list(self.source_tokens or ())}
        return doc


@dataclass(frozen=True, kw_only=True)
class Source:
    """The prepared table the plan ran over, pinned at ``version``; ``metadata`` is its ``prep`` metadata."""

    uri: str
    version: int
    num_rows: int
    metadata: TableMetadata


@dataclass(frozen=True, kw_only=True)
class MixtureTable:
    """One table of a mixture as materialized: pinned ``version``, its rows, those its filter selected
    (the rows available to draw from) and ``drawn_rows``, the most rows any epoch of the output drew from
    it (None: counted from the epochs by :class:`Manifest`, as for manifests written before the field).
    ``repeats`` says how often an epoch goes through its rows: above 1, rows repeat within an epoch."""

    uri: str
    version: int
    num_rows: int
    selected_rows: int
    drawn_rows: int | None = None

    @property
    def repeats(self) -> float:
        """Passes an epoch makes over the selected rows (drawn over available), to :data:`_REPEATS_DIGITS` digits."""
        return round((self.drawn_rows or 0) / max(1, self.selected_rows), _REPEATS_DIGITS)

    def describe(self) -> str:
        """One line for summaries and ``prep inspect``.

        >>> MixtureTable(uri="a.lance", version=1, num_rows=7473, selected_rows=7473, drawn_rows=10259).describe()
        'a.lance version 1: 7,473 rows available, 10,259 drawn an epoch, repeats 1.37x (rows repeat within an epoch)'
        """
        rows = f"{self.selected_rows:,} rows available" + (
            f" (its filter selected them of {self.num_rows:,})" if self.selected_rows != self.num_rows else "")
        why = "rows repeat within an epoch" if self.repeats > 1 else "no row repeats within an epoch"
        return f"{self.uri} version {self.version}: {rows}, {self.drawn_rows or 0:,} drawn an epoch, " \
               f"repeats {self.repeats:.2f}x ({why})"

    def to_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "version": self.version, "num_rows": self.num_rows, "selected_rows": self.selected_rows,
                "drawn_rows": self.drawn_rows, "repeats": self.repeats}


_REPEATS_DIGITS = 4


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """A materialized output's manifest (the JSON form is :meth:`to_json`)."""

    prep_version: str
    fingerprint: str
    source: Source
    plan: PlanSpec
    num_selected_rows: int
    columns: tuple[str, ...]
    epochs: tuple[Epoch, ...]
    mixture: tuple[MixtureTable, ...] | None = None  # a mixture's tables (``source`` is the first of them)

    def __post_init__(self) -> None:
        """An epoch that names no version drew from ``source`` (what a :data:`FORMAT_V1` manifest says); a mixture
        table that gives no ``drawn_rows`` drew the most its epochs' per-source counts say."""
        object.__setattr__(self, "epochs", tuple(
            e if e.version is not None and e.num_selected_rows is not None else replace(
                e, version=self.source.version if e.version is None else e.version,
                num_selected_rows=self.num_selected_rows if e.num_selected_rows is None else e.num_selected_rows)
            for e in self.epochs))
        counted = [e.source_rows for e in self.epochs if e.source_rows is not None]
        if self.mixture is not None and counted and len(counted) == len(self.epochs):
            object.__setattr__(self, "mixture", tuple(t if t.drawn_rows is not None else replace(
                t, drawn_rows=max(rows[i] for rows in counted)) for i, t in enumerate(self.mixture)))

    @property
    def versions(self) -> tuple[int, ...]:
        """The table versions the epochs drew from, ascending (one, unless the output was extended)."""
        return tuple(sorted({e.version for e in self.epochs if e.version is not None}))  # all, once built

    def epoch_fingerprint(self, entry: Epoch) -> str:
        """The fingerprint of the plan that wrote ``entry``: the plan over the version it drew from
        (its done records name it); the output's own for a mixture, whose versions are pinned once."""
        if self.mixture is not None:
            return self.fingerprint
        return self.plan.fingerprint(self.source.uri, self.source.version if entry.version is None else entry.version)

    def epoch(self, epoch: int) -> Epoch:
        """The entry of ``epoch``.

        Raises:
            PrepError: the output has no such epoch.
        """
        for e in self.epochs:
            if e.epoch == epoch:
                return e
        raise PrepError(f"epoch {epoch} is not materialized (the output has epochs {[e.epoch for e in self.epochs]})")

    def to_json(self) -> dict[str, Any]:
        src = self.source
        doc = {
            "format": FORMAT,
            "prep_version": self.prep_version,
            "fingerprint": self.fingerprint,
            "source": {"uri": src.uri, "version": src.version, "num_rows": src.num_rows, "metadata": src.metadata.to_json()},
            "plan": self.plan.to_json(),
            "num_selected_rows": self.num_selected_rows,
            "columns": list(self.columns),
            "epochs": [e.to_json(per_version=self.mixture is None) for e in self.epochs],
        }
        if self.mixture is not None:
            doc["mixture"] = {"tables": [t.to_json() for t in self.mixture]}
        return doc

    @classmethod
    def from_json(cls, doc: Any, uri: str) -> "Manifest":
        """The manifest ``doc`` read from ``uri``, checked key by key.

        Raises:
            PrepError: one line naming ``uri`` and the first thing that is wrong.
        """
        try:
            return _parse(doc)
        except PrepError as exc:
            raise PrepError(f"{uri}: {exc}; {RERUN}") from None


def _parse(doc: Any) -> Manifest:
    if not isinstance(doc, dict):
        raise PrepError("the top level is not a JSON object")
    if "format" in doc and doc["format"] not in (FORMAT, FORMAT_V1):
        raise PrepError(f"format={doc['format']!r}, this prep reads {FORMAT!r} and {FORMAT_V1!r} "
                        "(written by another prep version?)")
    missing = [k for k in _KEYS if k not in doc]
    if missing:
        raise PrepError(f"missing keys {missing}")
    unknown = sorted(set(doc) - set(_KEYS) - set(_OPTIONAL))
    if unknown:
        raise PrepError(f"unknown keys {unknown}")
    if not isinstance(doc["prep_version"], str):
        raise PrepError(f"prep_version={doc['prep_version']!r} must be a string")
    if not isinstance(doc["fingerprint"], str) or not _FINGERPRINT.match(doc["fingerprint"]):
        raise PrepError(f"fingerprint {doc['fingerprint']!r} is not 16 hex digits")
    src = doc["source"]
    if not isinstance(src, dict) or not isinstance(src.get("uri"), str) or not _int(src.get("version"), 1):
        raise PrepError("source must name the table's uri and its version (an integer >= 1)")
    if not _int(src.get("num_rows")) or not isinstance(src.get("metadata"), dict):
        raise PrepError("source must give num_rows (an integer >= 0) and metadata (an object)")
    plan = PlanSpec.from_json(doc["plan"])
    if not _int(doc["num_selected_rows"]):
        raise PrepError(f"num_selected_rows={doc['num_selected_rows']!r} must be an integer >= 0")
    if plan.mixture is None and doc["num_selected_rows"] > src["num_rows"]:
        raise PrepError(f"num_selected_rows={doc['num_selected_rows']} is more than the source's num_rows={src['num_rows']}")
    if not isinstance(doc["columns"], list) or not all(isinstance(c, str) for c in doc["columns"]):
        raise PrepError("columns must be a list of column names")
    if not isinstance(doc["epochs"], list) or not doc["epochs"]:
        raise PrepError("epochs must be a non-empty list")
    mixture = _mixture(doc.get("mixture"), plan)
    width = len(mixture) if mixture is not None else None
    per_version = doc.get("format") == FORMAT and mixture is None
    epochs = tuple(sorted((_epoch(entry, plan.num_splits, width, per_version) for entry in doc["epochs"]),
                          key=lambda e: e.epoch))
    numbers = [e.epoch for e in epochs]
    if len(set(numbers)) != len(numbers):
        raise PrepError(f"epochs {numbers} lists an epoch twice")
    if per_version:
        _versions(epochs, src["version"], doc["num_selected_rows"])
    _drawn(mixture, epochs)
    return Manifest(
        prep_version=doc["prep_version"], fingerprint=doc["fingerprint"],
        source=Source(uri=src["uri"], version=src["version"], num_rows=src["num_rows"],
                      metadata=TableMetadata.from_json(src["metadata"], "source.metadata")),
        plan=plan, num_selected_rows=doc["num_selected_rows"], columns=tuple(doc["columns"]), epochs=epochs,
        mixture=mixture,
    )


def vocab_size(manifest: "Manifest") -> int | None:
    """The vocabulary size the source's tokenizer records, None when the table has no tokenizer (images)."""
    tok = manifest.source.metadata.tokenizer
    return tok.vocab_size if tok is not None else None


def _mixture(doc: Any, plan: PlanSpec) -> tuple[MixtureTable, ...] | None:
    """The ``mixture`` block: present exactly when the plan is a mixture, one table per plan source."""
    mix = plan.mixture
    if (doc is None) != (mix is None):
        raise PrepError("mixture must be given exactly when plan.mixture is")
    if doc is None or mix is None:
        return None
    tables = doc.get("tables") if isinstance(doc, dict) and set(doc) == {"tables"} else None
    if not isinstance(tables, list) or len(tables) != len(mix.sources):
        raise PrepError(f"mixture must be {{\"tables\": [...]}} with one entry per plan source ({len(mix.sources)})")
    out = []
    for t in tables:
        keys = set(t) if isinstance(t, dict) else set()
        if not (keys in (_TABLE_KEYS, _TABLE_KEYS | _DRAWN_KEYS)
                and isinstance(t["uri"], str) and _int(t["version"], 1) and _int(t["num_rows"]) and _int(t["selected_rows"])):
            raise PrepError(f"mixture table {str(t)[:80]} needs uri, version (>= 1), num_rows and selected_rows "
                            "(and drawn_rows with repeats, or neither)")
        if t["selected_rows"] > t["num_rows"]:
            raise PrepError(f"mixture table {t['uri']}: selected_rows={t['selected_rows']} is more than its num_rows={t['num_rows']}")
        table = MixtureTable(uri=t["uri"], version=t["version"], num_rows=t["num_rows"], selected_rows=t["selected_rows"],
                             drawn_rows=t.get("drawn_rows"))
        if _DRAWN_KEYS <= keys and not (_int(t["drawn_rows"]) and isinstance(t["repeats"], (int, float))
                                        and not isinstance(t["repeats"], bool) and t["repeats"] == table.repeats):
            raise PrepError(f"mixture table {t['uri']}: drawn_rows={t['drawn_rows']!r} and repeats={t['repeats']!r} must be "
                            f"an integer >= 0 and drawn_rows / selected_rows ({table.repeats if _int(t['drawn_rows']) else '?'})")
        out.append(table)
    return tuple(out)


_TABLE_KEYS = {"uri", "version", "num_rows", "selected_rows"}
_DRAWN_KEYS = {"drawn_rows", "repeats"}  # written since issue 33; older manifests count them from their epochs


def _drawn(mixture: tuple[MixtureTable, ...] | None, epochs: tuple[Epoch, ...]) -> None:
    """Each table's ``drawn_rows`` is the most rows an epoch drew from it (its epochs' per-source counts)."""
    for i, t in enumerate(mixture or ()):
        most = max(rows[i] for rows in (e.source_rows for e in epochs) if rows is not None)  # a mixture's: all
        if t.drawn_rows is not None and t.drawn_rows != most:
            raise PrepError(f"mixture table {t.uri}: drawn_rows={t.drawn_rows} but its epochs drew at most {most} rows from it")


def _counts(entry: dict[str, Any], epoch: int, width: int | None) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """An epoch's per-source ``rows`` and ``tokens`` (mixtures only: ``width`` sources)."""
    doc = entry.get("sources")
    if width is None:
        if doc is not None:
            raise PrepError(f"epoch {epoch} has per-source counts but the plan is not a mixture")
        return None, None
    if not (isinstance(doc, dict) and set(doc) == {"rows", "tokens"} and all(
            isinstance(doc[k], list) and len(doc[k]) == width and all(_int(v) for v in doc[k]) for k in ("rows", "tokens"))):
        raise PrepError(f"epoch {epoch} needs sources {{rows, tokens}}: {width} counts each")
    return tuple(doc["rows"]), tuple(doc["tokens"])


def _versions(epochs: tuple[Epoch, ...], newest: int, selected: int) -> None:
    """``source`` is the newest version an epoch drew from, and its ``num_selected_rows`` that version's."""
    drawn = max(e.version for e in epochs if e.version is not None)  # each names one (a per-version manifest)
    if drawn != newest:
        raise PrepError(f"source.version={newest} is not the newest epoch version {drawn}")
    for e in epochs:
        if e.version == newest and e.num_selected_rows != selected:
            raise PrepError(f"epoch {e.epoch} drew {e.num_selected_rows} rows from version {newest}, "
                            f"num_selected_rows says {selected}")


def _epoch(entry: Any, num_splits: int, width: int | None, per_version: bool) -> Epoch:
    epoch = entry.get("epoch") if isinstance(entry, dict) else None
    if not _int(epoch) or not isinstance(entry.get("splits"), list):
        raise PrepError(f"epoch entry {str(entry)[:60]} needs an integer epoch and a list of splits")
    splits = [s.get("split") if isinstance(s, dict) else None for s in entry["splits"]]
    if splits != list(range(num_splits)):
        raise PrepError(f"epoch {epoch} lists splits {splits[:8]}{'...' if len(splits) > 8 else ''}, expected 0..{num_splits - 1}")
    files = []
    for s in entry["splits"]:
        path, n, checksum = s.get("path"), s.get("num_rows"), s.get("checksum")
        if not isinstance(path, str) or path.startswith("/") or ".." in path or not _int(n) or not isinstance(checksum, str):
            raise PrepError(f"epoch {epoch} split {s['split']}: bad path={path!r}, num_rows={n!r} or checksum={checksum!r}")
        files.append(SplitFile(split=s["split"], path=path, num_rows=n, checksum=checksum))
    version, selected = entry.get("version"), entry.get("num_selected_rows")
    if per_version and not (_int(version, 1) and _int(selected)):
        raise PrepError(f"epoch {epoch} needs the table version it drew from (an integer >= 1) and its "
                        f"num_selected_rows (an integer >= 0), got version={version!r}, num_selected_rows={selected!r}")
    if not per_version and (version, selected) != (None, None):
        raise PrepError(f"epoch {epoch} names a version: only a single table's {FORMAT} manifest has per-epoch versions")
    rows, tokens = _counts(entry, epoch, width)
    return Epoch(epoch=epoch, splits=tuple(files), source_rows=rows, source_tokens=tokens, version=version,
                 num_selected_rows=selected)
