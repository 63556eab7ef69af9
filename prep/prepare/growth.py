"""Growing a prepared table (``--append``, ``--update``): which input files it already holds, which are new.

A table records every input file it was made from (uri, id key, size, mtime, ETag on
object stores; :meth:`prep.prepare.listing.ListedFile.describe`) with the rows each
gave (its counts and the data files of its fragments). An append lists the inputs as
usual, under the root the table's ids were made under (so a file gets the id a
from-scratch run over all the files would give), and keeps the files whose identity
still matches: only the others are prepared. A file the table holds whose size, mtime
or ETag differs is refused (one line naming it) unless ``--update`` replaces its rows.
A job whose config or tokenizer differs from the table's is refused before anything is
read: rows of two configs in one table would not be a from-scratch run of either. Its class
names may only grow at the end (new classes that sort after every class it has), so no row
it holds changes its label.

A table whose inputs are too many for its metadata (an image folder: one file per row)
keeps their identities in its steps' file indexes (:mod:`prep.contracts.file_index`); their
rows carry the file's URI in their ``source`` column, so ``--update`` deletes a changed
file's rows (and its rejects) by that column, in the same commit.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any, Generic, Mapping, Sequence, TypeVar

import lance
from pydantic import BaseModel

from prep.contracts.counts import Counts
from prep.contracts.file_index import IndexRow
from prep.contracts.source import SourceEntry
from prep.contracts.images import ImageTableInfo
from prep.contracts.table import TABLE_FORMAT, TableMetadata, read_table_metadata
from prep.errors import PrepError
from prep.io import lance_tables, storage
from prep.io.file_index import read_index
from prep.prepare.listing import IdRoot, ListedFile, id_root_of, with_digest
from prep.runtime.config import RUNTIME_KEYS, JobConfig

__all__ = ["Prior", "Selection", "Growth", "read_prior", "rejects_base", "without_sources", "reject_counts"]

log = logging.getLogger(__name__)

F = TypeVar("F", bound=ListedFile)
Held = SourceEntry | IndexRow  # a file a table holds: a recorded source, or a row of a step's file index

# Config keys that say where the rows go and which files to read, not how rows are made.
_WHERE_KEYS = frozenset({"input", "output", "rejects"})


@dataclass(frozen=True)
class Selection(Generic[F]):
    """What a step prepares: ``files`` in listing order (each with its content's digest), the URIs among
    them it ``replaced`` (changed, with ``--update``), how many listed files it keeps as they are
    (``unchanged``), the held files whose rows it ``removed`` without a file of that URI taking their
    place (moved to a listed file, or gone with ``--remove-missing``), the ``moved`` pairs
    ``(was, now)`` among them, and the held files not listed now whose rows stay (``missing``)."""

    files: list[F]
    replaced: list[str]
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    moved: list[tuple[str, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @classmethod
    def everything(cls, files: Sequence[F]) -> Selection[F]:
        """A from-scratch run: every file is new (its digest taken, for a later ``--update``)."""
        return cls([with_digest(f) for f in files], [], 0)


@dataclass(frozen=True)
class Prior:
    """The committed table an append grows: the version it reads, and what that version says."""

    uri: str
    dataset: lance.LanceDataset
    metadata: TableMetadata
    s3: storage.S3Options | None = None

    @functools.cached_property
    def sources(self) -> dict[str, SourceEntry]:
        """The recorded sources by URI."""
        return {s.uri: s for s in self.metadata.sources}

    @functools.cached_property
    def indexed(self) -> dict[str, IndexRow]:
        """The input files its steps' file indexes list, by URI (one scan of each index)."""
        return read_index(self.uri, [h.file_index for h in self.metadata.history if h.file_index], self.s3)

    @functools.cached_property
    def files(self) -> dict[str, Held]:
        """Every input file it holds, by URI: the recorded sources with an id key, and the indexed files."""
        return {**{u: s for u, s in self.sources.items() if s.key is not None}, **self.indexed}

    def id_root(self) -> IdRoot:
        """The root its row ids were made under, read back from its files' id keys.

        Raises:
            PrepError: the table records no id keys (prep made it before ``--append`` existed).
        """
        if not self.files or (not self.indexed and any(s.key is None for s in self.metadata.sources)):
            raise PrepError(f"{self.uri} records no id key per input file (prep {self.metadata.prep_version} made it, "
                            "before --append existed): prepare it anew once with --overwrite, then append to it")
        roots = {id_root_of(s.uri, str(s.key)) for s in self.files.values()}
        if len(roots) != 1:
            raise PrepError(f"{self.uri} records id keys under {len(roots)} roots ({sorted(str(r.path) for r in roots)[:3]}): "
                            "its metadata was edited or is corrupt; prepare it anew with --overwrite")
        return roots.pop()

    def check_made_like(self, cfg: JobConfig, made_with: Mapping[str, Any]) -> None:
        """Refuses a job that would make rows differently from the table's (config, tokenizer, labels...).

        Raises:
            PrepError: one line naming the first difference and both values.
        """
        skip = RUNTIME_KEYS | _WHERE_KEYS
        ours = {k: v for k, v in cfg.model_dump(mode="json", exclude={"s3"}).items() if k not in skip}
        theirs = {k: v for k, v in self.metadata.config.items() if k not in skip}
        defaults = _defaults(type(cfg))  # a key the table's prep did not have yet: it made rows as the default does
        pairs = [(f"config {k}", theirs.get(k, defaults.get(k)), ours.get(k)) for k in sorted(set(ours) | set(theirs))]
        job = TableMetadata.from_json({"format": TABLE_FORMAT, "prep_version": "", **made_with}, "this job's")
        pairs += [(k, _made_with(self.metadata)[k], now) for k, now in _made_with(job).items()]
        for name, was, now in pairs:
            if name == "labels" and was != now:
                _check_labels_grow(self.uri, list(was or []), list(now or []))
            elif was != now:
                raise PrepError(f"{self.uri} was made with {name}={_short(was)}, this job has {_short(now)}: appending would mix "
                                "rows of two configs; append with the table's config, or prepare anew with --overwrite")

    def select(self, files: Sequence[F], *, update: bool, remove_missing: bool = False) -> Selection[F]:
        """Splits ``files`` into new ones, changed ones (replaced with ``update``), unchanged ones (skipped)
        and held files moved to a new name (their rows made anew under it with ``update``), by content:
        a local file whose inode and ctime are as recorded is unchanged without being read; else its
        digest (:func:`prep.prepare.listing.with_digest`) decides, and the ETag does on object stores.
        Held files not listed now keep their rows unless ``remove_missing``.

        Raises:
            PrepError: a file the table holds changed or moved since and ``update`` is off, naming it.
        """
        held, chosen, changed, kept = self.files, [], [], 0
        for f in files:
            was = held.get(f.uri)
            if was is not None and _untouched(was, f):
                kept += 1
                continue
            if was is None or was.digest:  # a table made before digests compares mtimes: no read
                f = with_digest(f)
            how = _differs(was, f) if was is not None else ""
            if was is not None and not how:
                kept += 1
                continue
            chosen.append(with_digest(f))
            if how:
                changed.append((f.uri, how))
        gone = sorted(held.keys() - {f.uri for f in files})
        moved = _moves({u: held[u] for u in gone}, [f for f in chosen if f.uri not in held])
        if (changed or moved) and not update:
            first = f"{changed[0][0]} changed since {self.uri} was made from it ({changed[0][1]})" if changed else \
                f"{moved[0][0]} moved to {moved[0][1]} (the same content) since {self.uri} was made from it"
            more = f" (and {len(changed) + len(moved) - 1} more)" if len(changed) + len(moved) > 1 else ""
            raise PrepError(f"{first}{more}: pass --update to replace its rows, or restore the file")
        missing = [u for u in gone if u not in {was for was, _ in moved}]
        if missing and not remove_missing:
            log.warning("%d file(s) %s holds are not among the inputs now (%s%s); their rows stay (--remove-missing removes them)",
                        len(missing), self.uri, missing[0], " ..." if len(missing) > 1 else "")
        removed = [was for was, _ in moved] + (missing if remove_missing else [])
        return Selection(chosen, [uri for uri, _ in changed], kept, removed, moved, [] if remove_missing else missing)


def _untouched(was: Held, now: ListedFile) -> bool:
    """True when a recorded file is surely as it was without reading it: its ETag (object stores), or its inode
    and ctime (locally) with its size and mtime, as recorded."""
    if was.etag and now.etag:
        return was.size == now.size and was.etag == now.etag
    return was.size == now.size and was.mtime == now.mtime and bool(was.stamp) and was.stamp == now.stamp


def _moves(gone: Mapping[str, Held], new: Sequence[ListedFile]) -> list[tuple[str, str]]:
    """``(held URI, new URI)`` for each new file with the content of a held file that is not listed now
    (the same size and digest, or the same size and ETag); each held file moves once, in listing order."""
    by_content: dict[tuple[int, str], list[str]] = {}
    for uri, was in gone.items():
        content = was.digest or was.etag
        if content and was.size is not None:
            by_content.setdefault((was.size, content), []).append(uri)
    moved = []
    for f in new:
        olds = by_content.get((f.size, f.digest or f.etag))
        if olds:
            moved.append((olds.pop(0), f.uri))
    return moved


def _check_labels_grow(uri: str, was: list[str], now: list[str]) -> None:
    """Accepts class names that keep every class of ``was`` at its number (new ones sort after all of
    them, as a from-scratch run over all the files then numbers them); refuses anything else, naming a new class.

    >>> _check_labels_grow("t", ["ants", "bees"], ["ants", "bees", "wasps"])
    >>> _check_labels_grow("t", ["ants", "bees"], ["ants", "aphids", "bees"])
    Traceback (most recent call last):
    prep.errors.PrepError: t has classes ['ants', 'bees'] (label 0-1); the new class 'aphids' sorts before 'bees', so a from-scratch run would renumber them to ['ants', 'aphids', 'bees']: prepare all the images anew with --overwrite (labels: in the config pins the numbering, new classes listed last), or name the new class so it sorts after 'bees'
    """
    if was and now[: len(was)] == was:
        return
    new = [n for n in now if n not in was]
    if not was or not new:
        raise PrepError(f"{uri} was made with labels={_short(was)}, this job has {_short(now)}: appending would mix "
                        "rows of two label maps; append with the table's config, or prepare anew with --overwrite")
    raise PrepError(f"{uri} has classes {_short(was)} (label 0-{len(was) - 1}); the new class {new[0]!r} sorts before {was[-1]!r}, "
                    f"so a from-scratch run would renumber them to {_short(now)}: prepare all the images anew with --overwrite "
                    f"(labels: in the config pins the numbering, new classes listed last), or name the new class so it sorts after {was[-1]!r}")


def _made_with(meta: TableMetadata) -> dict[str, Any]:
    """What in a table's metadata says how its rows were made (its counts, decoder and sources do not), in JSON form."""
    images = meta.images or ImageTableInfo()
    return {"kind": meta.kind, "tokenizer": meta.tokenizer.to_json() if meta.tokenizer else None, "seq_len": meta.seq_len,
            "image": meta.image.to_json() if meta.image else None, "encoded": images.encoded.to_json() if images.encoded else None,
            "labels": list(images.labels), "source_kind": images.source_kind}


def _defaults(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON form of each field's default (fields without one left out)."""
    out = {}
    for name, f in model.model_fields.items():
        if not f.is_required():
            value = f.get_default(call_default_factory=True)
            out[name] = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    return out


def _differs(was: Held, now: ListedFile) -> str:
    """What changed between a recorded file and its listing now ("" when nothing did): its content's
    identity (ETag, digest) decides when both sides have it, so a rewrite of the same bytes is no change;
    a table made before digests compares mtimes."""
    if was.size != now.size:
        return f"size {was.size} -> {now.size} bytes"
    if was.etag and now.etag:
        return f"ETag {was.etag} -> {now.etag}" if was.etag != now.etag else ""
    if was.digest and now.digest:
        return f"content {was.digest[:19]} -> {now.digest[:19]}" if was.digest != now.digest else ""
    if was.mtime != now.mtime:
        return f"mtime {was.mtime} -> {now.mtime}"
    return ""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def read_prior(uri: str, s3: storage.S3Options) -> Prior | None:
    """The latest committed table at ``uri``, None when there is none (then an append is a first run).

    Raises:
        PrepError: ``uri`` holds something that is not a table prep made.
    """
    opts = storage.lance_storage_options(uri, s3)
    if not lance_tables.table_exists(uri, opts):
        return None
    ds = lance_tables.open_table(uri, storage_options=opts)
    before = lance_tables.unfinished(ds)
    if before is not None:  # a step died between its rows and its metadata: build on the version before it
        log.warning("%s: version %d holds the rows of a step that did not finish; this step builds on version %d", uri, ds.version, before)
        ds = lance_tables.open_table(uri, version=before, storage_options=opts)
    return Prior(uri, ds, read_table_metadata(ds, uri), s3)


@dataclass(frozen=True)
class Growth:
    """What a step on top of ``prior`` keeps and replaces: the sources' rows it removes.

    A replaced file whose rows the table recorded (``data_files``: its chunks held no other
    file's rows) goes with its fragments, and its rejects with theirs (``reject_files``) and by
    their ``source``; an indexed file's rows (``by_rows``) are deleted by
    their ``source`` column, and what they counted is counted in the table and its rejects.
    """

    prior: Prior
    replaced: tuple[str, ...]
    removed: Counts
    by_rows: tuple[str, ...] = ()

    @classmethod
    def of(cls, prior: Prior, replaced: list[str], rejects: str) -> Growth:
        """Raises PrepError when a replaced file's rows were not recorded (chunks that mix files), or when the
        table's rejects table is gone (its counts could no longer reconcile), before anything is written."""
        if not lance_tables.table_exists(rejects, storage.lance_storage_options(rejects, prior.s3)):
            raise PrepError(f"{rejects}, the rejects table of {prior.uri}, is missing (moved or deleted): the table's counts "
                            f"({prior.metadata.counts.rows_rejected} rejected rows) could no longer reconcile; restore it, "
                            "or prepare the table anew with --overwrite")
        removed = Counts()
        by_rows = tuple(u for u in replaced if u in prior.indexed)
        for uri in (u for u in replaced if u not in by_rows):
            recorded = prior.sources[uri]
            if recorded.data_files is None:
                raise PrepError(f"{uri} changed, but {prior.uri} does not record which rows it gave (its chunks mix files): "
                                "--update cannot replace them; prepare the table anew with --overwrite")
            removed += recorded.counts or Counts()
        if by_rows:
            removed += _counted(prior, by_rows, rejects)
        return cls(prior, tuple(replaced), removed, by_rows)

    def kept_sources(self, step: list[SourceEntry]) -> list[SourceEntry]:
        """The prior's sources the step neither replaced nor removed nor records anew (an image folder it listed again)."""
        gone = set(self.replaced) | {s.uri for s in step}
        return [s for s in self.prior.metadata.sources if s.uri not in gone]

    def totals(self, step: Counts) -> Counts:
        """The table's counts after the step: the prior's, less the replaced files', plus the step's."""
        return (self.prior.metadata.counts + step).minus(self.removed.without_formats())

    def _recorded(self) -> list[SourceEntry]:
        """The replaced files the table records as sources (not in a file index: their rows and rejects are recorded)."""
        return [self.prior.sources[uri] for uri in self.replaced if uri not in self.by_rows and uri in self.prior.sources]

    def removed_data_files(self) -> set[str]:
        return {p for s in self._recorded() for p in s.data_files or ()}

    def removed_reject_files(self) -> set[str]:
        """The rejects' data files the replaced files' chunks wrote (their rejects may name
        other URIs: a manifest's images), recorded like their ``data_files``."""
        return {p for s in self._recorded() for p in s.reject_files or ()}


def _counted(prior: Prior, uris: tuple[str, ...], rejects: str) -> Counts:
    """What the indexed files ``uris`` counted, counted where their rows are: one row or one reject
    per image (its file's recorded size read), files rejected whole."""
    where = source_filter(uris)
    written = prior.dataset.to_table(columns=["source"], filter=where).column("source").to_pylist()
    base = rejects_base(prior, rejects, storage.lance_storage_options(rejects, prior.s3))
    rejected = base.to_table(columns=["source"], filter=f"({where}) AND position != 'file'").column("source").to_pylist() if base else []
    files = base.count_rows(filter=f"({where}) AND position = 'file'") if base else 0
    return Counts(rows_read=len(written) + len(rejected), rows_accepted=len(written), rows_written=len(written),
                  rows_rejected=len(rejected), files_rejected=files, bytes_read=sum(prior.indexed[u].size for u in written + rejected))


def rejects_base(prior: Prior | None, rejects: str, opts: dict[str, str] | None) -> Any:
    """The rejects version a growing step builds on: the one the table's last step names (a later
    one is a killed step's), else the latest; None when there is none (a first run)."""
    if prior is None or not lance_tables.table_exists(rejects, opts):
        return None
    return lance_tables.open_table(rejects, version=prior.metadata.history[-1].rejects_version, storage_options=opts)


def source_filter(uris: tuple[str, ...]) -> str:
    return "source IN (" + ", ".join("'" + u.replace("'", "''") + "'" for u in uris) + ")"


def without_sources(fragments: list[Any], uris: tuple[str, ...]) -> list[Any]:
    """The metadata of ``fragments`` (of one dataset) with the rows whose ``source`` is in ``uris``
    deleted: a deletion file each, their data files untouched; a fragment left empty is dropped."""
    if not uris:
        return [f.metadata for f in fragments]
    keep, where = [], source_filter(uris)
    for f in fragments:
        hit = f.count_rows(filter=where)
        if not hit:
            keep.append(f.metadata)
        elif hit < f.count_rows():
            keep.append(f.delete(where))
    return keep


def reject_counts(fragments: list[Any], without: tuple[str, ...]) -> tuple[int, int]:
    """``(row rejects, file rejects)`` in ``fragments`` (of a rejects table), leaving out those of the sources ``without``."""
    extra = f" AND NOT ({source_filter(without)})" if without else ""
    return (sum(f.count_rows(filter="position != 'file'" + extra) for f in fragments),
            sum(f.count_rows(filter="position = 'file'" + extra) for f in fragments))
