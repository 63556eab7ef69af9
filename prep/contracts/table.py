"""The metadata a prepared table carries about itself: one typed form, one parser.

Every prepare job stores a JSON object under the ``prep`` key of the Lance schema
metadata (:data:`METADATA_KEY`); its rejects table stores ``{"of": <table uri>}``.
The reader (collate spec, row size), ``prep inspect`` and the mixture checks read it
through :func:`read_metadata`, never with ``dict.get`` guesses, so a table that
lacks a field, or says something impossible (a pad id outside the vocabulary), is
one error naming the table and the field instead of a wrong batch later.

Example (``docs/architecture.md`` has the columns beside it)::

    {"format": "prep.table/1", "prep_version": "0.1.0", "kind": "sft",
     "tokenizer": {"name": "builtin:mistral-v3", "hash": "…", "vocab_size": 32768,
                   "bos_id": 1, "eos_id": 2, "pad_id": null},
     "seq_len": null, "config": {...}, "config_hash": "…",
     "sources": [{"uri": "train.jsonl", "size": 4166206, "mtime": "…"}],
     "counts": {"rows_read": 7473, "rows_written": 7473, ...}, "rejects_uri": "….rejects.lance",
     "history": [{"version": 1, "added": ["train.jsonl"], "replaced": [], "rows_added": 7473, ...}]}

``history`` has a :class:`Step` per table version a prepare job committed (a from-scratch
run is one step; each ``--append``/``--update`` adds one); a table written before it
existed reads as one step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Mapping, TypeAlias, get_args, overload

from prep.contracts.counts import Counts
from prep.contracts.images import IMAGE_TABLE_KEYS, ImageInfo, ImageTableInfo
from prep.contracts.source import SourceEntry
from prep.errors import PrepError

__all__ = ["METADATA_KEY", "TABLE_FORMAT", "Kind", "KINDS", "TEXT_KINDS", "TokenizerInfo", "ImageInfo", "read_table_metadata",
           "Step", "TableMetadata", "RejectsMetadata", "read_metadata", "encode_metadata", "JsonValue"]

METADATA_KEY = b"prep"
TABLE_FORMAT = "prep.table/1"
Kind = Literal["sft", "pretrain", "packed", "images"]
KINDS: tuple[str, ...] = get_args(Kind)
TEXT_KINDS: tuple[str, ...] = ("sft", "pretrain", "packed")
# What a JSON document holds: the config and a job's own keys are kept as written.
JsonValue: TypeAlias = "str | int | float | bool | None | list[JsonValue] | dict[str, JsonValue]"
_FIELDS = {"format", "prep_version", "kind", "config", "config_hash", "sources", "counts", "rejects_uri",
           "tokenizer", "seq_len", "image", "history", "inferred", *IMAGE_TABLE_KEYS}


def _fail(where: str, what: str) -> PrepError:
    return PrepError(f"{where}: prep table metadata {what}")


@overload
def _int(where: str, name: str, value: Any, *, low: int = 0, optional: Literal[False] = False) -> int: ...
@overload
def _int(where: str, name: str, value: Any, *, low: int = 0, optional: bool) -> int | None: ...
def _int(where: str, name: str, value: Any, *, low: int = 0, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _fail(where, f"{name}={value!r} must be an integer >= {low}")
    return value


def _known(where: str, name: str, raw: Mapping[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise _fail(where, f"{name}.{unknown[0]}={raw[unknown[0]]!r} is not a field prep writes (one of {list(known)})")


def _token_id(where: str, name: str, value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise _fail(where, f"{name}={value!r} must be a token id: an integer >= 0")
    return value


@dataclass(frozen=True, kw_only=True)
class TokenizerInfo:
    """Which tokenizer made the tokens, and the ids the reader pads with."""

    name: str
    hash: str
    vocab_size: int | None = None
    bos_id: int | None = None
    eos_id: int | None = None
    pad_id: int | None = None

    @property
    def pad_or_eos(self) -> int | None:
        """The id that fills padding: the pad id, else the eos id."""
        return self.pad_id if self.pad_id is not None else self.eos_id

    @classmethod
    def from_json(cls, raw: Any, where: str) -> TokenizerInfo:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
            raise _fail(where, f"tokenizer={raw!r} must be an object with a name")
        _known(where, "tokenizer", raw, ("name", "hash", "vocab_size", "bos_id", "eos_id", "pad_id"))
        vocab = _int(where, "tokenizer.vocab_size", raw.get("vocab_size"), low=1, optional=True)
        ids = {k: _token_id(where, f"tokenizer.{k}", raw.get(k)) for k in ("bos_id", "eos_id", "pad_id")}
        for k, v in ids.items():
            if v is not None and vocab is not None and v >= vocab:
                raise _fail(where, f"tokenizer.{k}={v} must be a token id: an integer >= 0 and < vocab_size {vocab}")
        return cls(name=raw["name"], hash=str(raw.get("hash", "")), vocab_size=vocab, **ids)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "hash": self.hash, "vocab_size": self.vocab_size,
                "bos_id": self.bos_id, "eos_id": self.eos_id, "pad_id": self.pad_id}


@dataclass(frozen=True, kw_only=True)
class Step:
    """One committed prepare step: what it added to the table and what it replaced.

    Args:
        version: the table version the step committed (None: a table written before steps were recorded).
        added: the input files it prepared for the first time (empty when ``file_index`` lists them).
        replaced: the files whose rows it replaced (``--update``: they had changed; empty when ``file_index`` lists them).
        removed: the held files whose rows it removed with no file of that URI in their place (moved to
            another name, or gone from the inputs with ``--remove-missing``; empty when ``file_index`` lists them).
        files_added, files_replaced, files_removed: how many files it added, replaced and removed (``len(added)``,
            ``len(replaced)``, ``len(removed)`` unless ``file_index`` lists them).
        rows_added, rows_removed: table rows it committed and deleted.
        tokens_added, tokens_removed: their tokens (text tables; 0 for images).
        rejects_version: the version of the rejects table committed with it (None: not recorded).
        file_index: where the step listed the files it read, relative to the table, when they are too
            many for the metadata (image folders: one file per row; :mod:`prep.contracts.file_index`).
    """

    version: int | None
    added: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    rows_added: int = 0
    rows_removed: int = 0
    tokens_added: int = 0
    tokens_removed: int = 0
    rejects_version: int | None = None
    files_added: int | None = None
    files_replaced: int | None = None
    files_removed: int | None = None
    file_index: str | None = None

    def __post_init__(self) -> None:
        for name, listed in (("files_added", self.added), ("files_replaced", self.replaced), ("files_removed", self.removed)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, len(listed))

    @classmethod
    def from_json(cls, raw: Any, where: str) -> Step:
        if not isinstance(raw, Mapping):
            raise _fail(where, f"history entry {raw!r} must be an object")
        _known(where, "history", raw, tuple(f.name for f in fields(cls)))
        files = {k: raw.get(k) or [] for k in ("added", "replaced", "removed")}
        for k, v in files.items():
            if not isinstance(v, list) or not all(isinstance(u, str) for u in v):
                raise _fail(where, f"history.{k}={v!r} must be a list of URIs")
        index = raw.get("file_index")
        if index is not None and not isinstance(index, str):
            raise _fail(where, f"history.file_index={index!r} must be a path")
        def count(k: str) -> int:
            return _int(where, f"history.{k}", raw.get(k, 0))

        def given(k: str, low: int = 0) -> int | None:
            return _int(where, f"history.{k}", raw.get(k), low=low, optional=True)

        return cls(version=given("version", low=1),
                   added=tuple(files["added"]), replaced=tuple(files["replaced"]), removed=tuple(files["removed"]),
                   rows_added=count("rows_added"), rows_removed=count("rows_removed"),
                   tokens_added=count("tokens_added"), tokens_removed=count("tokens_removed"),
                   rejects_version=given("rejects_version", low=1), files_added=given("files_added"),
                   files_replaced=given("files_replaced"), files_removed=given("files_removed"), file_index=index)

    def describe(self) -> str:
        """One line for summaries and ``prep inspect``.

        >>> Step(version=2, added=("/d/c.jsonl",), rows_added=10, tokens_added=2085).describe()
        'version 2: +1 file (c.jsonl), +10 rows, +2,085 tokens'
        >>> Step(version=3, files_added=2, files_replaced=1, rows_added=3, rows_removed=1, file_index="_prep_files/v3.parquet").describe()
        'version 3: +2 files, replaced 1 file, +3 rows, -1 rows (files listed in _prep_files/v3.parquet)'
        """
        def files(n: int, uris: tuple[str, ...]) -> str:
            names = ", ".join(u.rsplit("/", 1)[-1] for u in uris[:3]) + (" ..." if len(uris) > 3 else "")
            return f"{n:,} file{'s' if n != 1 else ''}" + (f" ({names})" if uris else "")

        parts = [f"+{files(self.files_added or 0, self.added)}"] if self.files_added else []
        parts += [f"replaced {files(self.files_replaced or 0, self.replaced)}"] if self.files_replaced else []
        parts += [f"removed {files(self.files_removed or 0, self.removed)}"] if self.files_removed else []
        parts += [f"+{self.rows_added:,} rows"] + ([f"-{self.rows_removed:,} rows"] if self.rows_removed else [])
        if self.tokens_added or self.tokens_removed:
            parts += [f"+{self.tokens_added:,} tokens"] + ([f"-{self.tokens_removed:,} tokens"] if self.tokens_removed else [])
        where = f" (files listed in {self.file_index})" if self.file_index else ""
        return f"version {self.version if self.version is not None else '?'}: " + ", ".join(parts) + where

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "added": list(self.added), "replaced": list(self.replaced), "removed": list(self.removed),
                "rows_added": self.rows_added, "rows_removed": self.rows_removed, "tokens_added": self.tokens_added,
                "tokens_removed": self.tokens_removed, "rejects_version": self.rejects_version,
                "files_added": self.files_added, "files_replaced": self.files_replaced, "files_removed": self.files_removed,
                "file_index": self.file_index}


@dataclass(frozen=True, kw_only=True)
class TableMetadata:
    """What a prepared table says about itself.

    Args:
        kind: ``sft``, ``pretrain``, ``packed`` (text) or ``images``.
        prep_version: the prep that wrote it.
        config: the resolved job config (secrets left out); ``config_hash`` its hash.
        sources: provenance of every input (:class:`~prep.contracts.source.SourceEntry`).
        counts: rows read/written/rejected, tokens... as counted by the job (:class:`~prep.contracts.counts.Counts`).
        rejects_uri: where its rejects table is.
        tokenizer: text tables: the tokenizer's identity and special ids.
        seq_len: packed tables: the row length.
        image: image tables that store pixels: their shape.
        history: the steps that made the table, oldest first (one for a table written before
            steps were recorded).
        images: image tables prep wrote: their labels, source kind, encoding and decoder
            (:class:`~prep.contracts.images.ImageTableInfo`).
        inferred: None for a table prep wrote; for one it did not, what prep inferred from its
            columns, in one sentence (:mod:`prep.contracts.foreign`).
    """

    kind: Kind
    prep_version: str
    config: Mapping[str, JsonValue] = field(default_factory=dict)
    config_hash: str = ""
    sources: tuple[SourceEntry, ...] = ()
    counts: Counts = field(default_factory=Counts)
    rejects_uri: str = ""
    tokenizer: TokenizerInfo | None = None
    seq_len: int | None = None
    image: ImageInfo | None = None
    history: tuple[Step, ...] = ()
    images: ImageTableInfo | None = None
    format: str = TABLE_FORMAT
    inferred: str | None = None

    @classmethod
    def from_json(cls, raw: Any, where: str) -> TableMetadata:
        """Parses the ``prep`` metadata of the table at ``where``.

        Raises:
            PrepError: a newer format, an unknown kind, a key prep does not write, or a field of
                the wrong type or out of range, naming the table and the field.
        """
        if not isinstance(raw, Mapping):
            raise _fail(where, f"must be a JSON object, not {type(raw).__name__}")
        unknown = sorted(set(raw) - _FIELDS)
        if unknown:
            raise _fail(where, f"{unknown[0]}={raw[unknown[0]]!r} is not a field prep writes (one of {sorted(_FIELDS)})")
        fmt = raw.get("format")
        if fmt != TABLE_FORMAT:
            raise PrepError(f"{where} was written in format {fmt!r} by prep {raw.get('prep_version', '?')}; "
                            f"this prep reads {TABLE_FORMAT!r}: upgrade prep to read it")
        kind = raw.get("kind")
        if kind not in KINDS:
            raise _fail(where, f"kind={kind!r} must be one of {list(KINDS)}")
        counts = Counts.from_json(raw.get("counts") or {}, f"{where}: prep table metadata")
        listed = raw.get("sources") or []
        if not isinstance(listed, list):
            raise _fail(where, "sources must be a list of objects")
        sources = tuple(SourceEntry.from_json(s, where) for s in listed)
        inferred = raw.get("inferred")
        if inferred is not None and not isinstance(inferred, str):
            raise _fail(where, f"inferred={inferred!r} must be a sentence")
        tokenizer = TokenizerInfo.from_json(raw["tokenizer"], where) if raw.get("tokenizer") is not None else None
        if kind in TEXT_KINDS and tokenizer is None and inferred is None:
            raise _fail(where, f"of a {kind} table names no tokenizer")
        seq_len = _int(where, "seq_len", raw.get("seq_len"), low=1, optional=True)
        if kind == "packed" and seq_len is None:
            raise _fail(where, "of a packed table has no seq_len")
        image = ImageInfo.from_json(raw["image"], where) if raw.get("image") is not None else None
        config = raw.get("config") or {}
        if not isinstance(config, Mapping):
            raise _fail(where, "config must be an object")
        history = raw.get("history")
        if inferred is not None and history == []:  # a table prep did not write: no steps are known
            steps: tuple[Step, ...] = ()
        elif history is None:  # written before steps were recorded: one step made all of it
            steps = (Step(version=None, added=tuple(s.uri for s in sources),
                          rows_added=counts.rows_written, tokens_added=counts.tokens),)
        elif isinstance(history, list) and history:
            steps = tuple(Step.from_json(h, where) for h in history)
        else:
            raise _fail(where, f"history={history!r} must be a non-empty list of steps")
        return cls(kind=kind, prep_version=str(raw.get("prep_version", "?")), config=config,
                   config_hash=str(raw.get("config_hash", "")), sources=sources, counts=counts,
                   rejects_uri=str(raw.get("rejects_uri", "")), tokenizer=tokenizer, seq_len=seq_len, image=image,
                   history=steps, inferred=inferred,
                   images=ImageTableInfo.from_json(raw, where) if any(k in raw for k in IMAGE_TABLE_KEYS) else None)

    def to_json(self) -> dict[str, Any]:
        """The JSON object stored in the table (and in a manifest's ``source.metadata``)."""
        return {
            **(self.images.to_json() if self.images else {}),
            "format": self.format, "prep_version": self.prep_version, "kind": self.kind,
            "config": dict(self.config), "config_hash": self.config_hash, "sources": [s.to_json() for s in self.sources],
            "counts": self.counts.to_json(), "rejects_uri": self.rejects_uri,
            "tokenizer": self.tokenizer.to_json() if self.tokenizer else None, "seq_len": self.seq_len,
            "image": self.image.to_json() if self.image else None,
            "history": [h.to_json() for h in self.history],
            **({"inferred": self.inferred} if self.inferred is not None else {}),
        }


@dataclass(frozen=True)
class RejectsMetadata:
    """What a rejects table says about itself: the table it belongs to."""

    of: str


def encode_metadata(meta: TableMetadata | RejectsMetadata) -> dict[bytes, bytes]:
    """The Lance schema metadata entry for ``meta``."""
    body = meta.to_json() if isinstance(meta, TableMetadata) else {"of": meta.of}
    return {METADATA_KEY: json.dumps(body, sort_keys=True).encode()}


def read_metadata(schema_metadata: Mapping[bytes, bytes] | None, where: str) -> TableMetadata | RejectsMetadata | None:
    """The metadata of a table from its schema metadata; None when prep did not write it.

    Raises:
        PrepError: prep's entry is there but is not valid JSON or breaks the contract.
    """
    raw = (schema_metadata or {}).get(METADATA_KEY)
    if not raw:
        return None
    try:
        body = json.loads(raw)
    except ValueError:
        raise _fail(where, "is not valid JSON") from None
    if isinstance(body, Mapping) and "of" in body and "format" not in body:
        return RejectsMetadata(of=str(body["of"]))
    return TableMetadata.from_json(body, where)


def read_table_metadata(ds: Any, where: str) -> TableMetadata:
    """The metadata of the prepared table ``ds`` (an open Lance dataset) at ``where``.

    Raises:
        PrepError: ``ds`` is not a prepared table prep wrote (no metadata, or a rejects table).
    """
    meta = read_metadata(ds.schema.metadata, where)
    if not isinstance(meta, TableMetadata):
        what = "a rejects table" if isinstance(meta, RejectsMetadata) else "a Lance table prep did not write (no prep metadata)"
        raise PrepError(f"{where} is {what}, not a prepared table from prep pretokenize/decode-images")
    return meta
