"""Finding images and planning them into chunks, for every source kind.

The driver plans from listings and small files only (directory listings, manifests,
tar and Parquet file sizes, Parquet footers), so the same inputs give the same
chunks and the same row order on any cluster. A chunk is a run of consecutive image
files (ImageFolder; a manifest's, never two manifests'), one tar shard (WebDataset) or a
range of row groups (Parquet). Workers read chunks with :func:`read_chunk`, which yields a
:class:`Sample` per image or a :class:`~prep.prepare.rejects.Reject`.

Row order: inputs in the order given; inside each, files sorted by path (ImageFolder),
manifest rows in file order, tar members in archive order, Parquet rows in file order.

Growing a table (``--append``/``--update``, :mod:`prep.prepare.growth`): the unit is the
input file: a tar shard, a Parquet file, a manifest, or one image of an ImageFolder tree.
An ImageFolder table records its input folders in its metadata and its image files in its
steps' file indexes (:mod:`prep.contracts.file_index`); an image it rejected is held as
much as one it wrote. Only the selected files are read; class names discovered by an
append are the table's and the new files' (a file the table holds added its class then).
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field, replace
from typing import Any, Iterator

from prep.contracts.source import SourceEntry
from prep.io import storage
from prep.errors import PrepError
from prep.prepare.images import shards, tables
from prep.prepare.images.config import ImagesConfig
from prep.prepare.images.labels import LabelMap
from prep.prepare.ids import key_hash
from prep.prepare.growth import Prior, Selection
from prep.prepare.listing import ListedFile, Listing, dangling_link, list_inputs
from prep.prepare.images.samples import FILE_KEY, Sample
from prep.prepare.images.shards import TarChunk
from prep.prepare.images.tables import ParquetChunk
from prep.prepare.rejects import Reject

__all__ = ["FileItem", "FilesChunk", "ImagePlan", "plan", "read_chunk", "Sample", "TarChunk", "ParquetChunk"]

_MANIFEST_EXTS = (".csv", ".tsv", ".jsonl", ".ndjson", ".json")


@dataclass(frozen=True, slots=True)
class FileItem:
    """One image file to read, or a planned reject (``problem`` set) at ``uri``/``position``."""

    uri: str
    key: str
    label: Any = None
    size: int = 0
    position: str = "image"
    problem: str | None = None


@dataclass(frozen=True)
class FilesChunk:
    """Consecutive image files (ImageFolder or manifest)."""

    items: tuple[FileItem, ...]

    def __str__(self) -> str:
        return f"{self.items[0].uri} .. {self.items[-1].uri} ({len(self.items)} files)"


@dataclass
class ImagePlan:
    """What the driver decided: the source kind, the chunks, the labels, the sources' identity.

    ``chunk_sources``, ``replaced``, ``unchanged``, ``file_index``, ``removed``, ``moved`` and
    ``missing`` are :class:`~prep.prepare.driver.ChunkPlan`'s.
    """

    kind: str
    chunks: list[Any]
    labels: LabelMap
    sources: list[SourceEntry] = field(default_factory=list)
    files: int = 0
    chunk_sources: list[str] | None = None
    replaced: list[str] = field(default_factory=list)
    unchanged: int = 0
    file_index: list[SourceEntry] | None = None
    removed: list[str] = field(default_factory=list)
    moved: list[tuple[str, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def _infer_kind(cfg: ImagesConfig, listing: Listing, s3: storage.S3Options | None) -> str:
    given, is_dir = listing.given, listing.is_dir
    exts = {os.path.splitext(f.uri)[1].lower() for f in listing.files}
    if exts == {".tar"}:
        return "webdataset"
    if exts == {".parquet"}:
        names = tables.parquet_columns(listing.files[0].uri, s3)
        if cfg.image_column in names:
            return "parquet"
        if cfg.path_column in names:
            return "manifest"
        raise PrepError(f"{given}: Parquet without an image column '{cfg.image_column}' or a path column '{cfg.path_column}'; set image_column or path_column")
    if not is_dir and exts <= set(_MANIFEST_EXTS):
        return "manifest"
    if is_dir:
        return "imagefolder"
    raise PrepError(f"{given}: cannot tell the source kind from {sorted(exts)}; set source: imagefolder, manifest, webdataset or parquet")


def _imagefolder(listing: Listing, chosen: set[str]) -> tuple[list[FileItem], SourceEntry]:
    """The items of the ``chosen`` files of ``listing``, and the folder as listed (its files are in the file index)."""
    if not listing.is_dir:
        raise PrepError(f"input {listing.given}: an ImageFolder input must be a directory of class folders (root/<class>/image)")
    items = []
    for f in listing.files:
        if f.uri not in chosen:
            continue
        if "/" not in f.key:
            items.append(FileItem(f.uri, f.ids_from, size=f.size, problem="not inside a class folder (expected root/<class>/image)"))
        else:
            items.append(FileItem(f.uri, f.ids_from, label=f.key.split("/", 1)[0], size=f.size))
    return items, SourceEntry(uri=listing.given, files=len(listing.files), bytes=sum(f.size for f in listing.files))


def _manifest(cfg: ImagesConfig, files: list[ListedFile], s3: storage.S3Options | None) -> tuple[list[list[FileItem]], list[SourceEntry]]:
    """The items of each manifest in ``files``, and the manifests' identities."""
    groups, sources = [], []
    for f in files:
        uri = f.uri
        rows = tables.read_label_file(uri, cfg.path_column, cfg.label_column, s3)
        items: list[FileItem] = []
        groups.append(items)
        base = cfg.image_root or posixpath.dirname(uri)
        for row in rows:
            if row.problem is not None:
                items.append(FileItem(uri, "", position=row.position, problem=row.problem))
                continue
            if not isinstance(row.path, str) or not row.path.strip():
                items.append(FileItem(uri, "", position=row.position, problem=f"column '{cfg.path_column}' is empty or not a string ({row.path!r})"))
                continue
            path = row.path.strip()
            target = path if "://" in path or os.path.isabs(path) else storage.join(base, path)
            items.append(FileItem(target, path, label=row.label))
        sources.append(replace(f.describe(), rows=len(rows)))
    return groups, sources


def _file_chunks(items: list[FileItem], cfg: ImagesConfig) -> list[FilesChunk]:
    chunks, current, size = [], [], 0
    for item in items:
        if current and (len(current) >= cfg.images_per_chunk or size + item.size > cfg.chunk_bytes):
            chunks.append(FilesChunk(tuple(current)))
            current, size = [], 0
        current.append(item)
        size += item.size
    if current:
        chunks.append(FilesChunk(tuple(current)))
    return chunks


def _labels(cfg: ImagesConfig, kind: str, raw: list[Any], held: list[str]) -> LabelMap:
    """The configured class names, else those discovered in ``raw`` and the ``held`` ones (a table's, on append)."""
    if cfg.labels is not None:
        return LabelMap(tuple(cfg.labels))
    names = [x for x in raw if x is not None] + held
    if kind == "imagefolder" or any(isinstance(x, str) and not x.strip().lstrip("-").isdigit() for x in names):
        return LabelMap.discovered(names)
    return LabelMap(None)


def plan(cfg: ImagesConfig, s3: storage.S3Options | None = None, prior: Prior | None = None) -> ImagePlan:
    """Lists the inputs, picks the source kind, fixes the labels and cuts chunks; with ``prior``
    (an append), plans only the files ``prior`` does not hold as they are.

    Raises:
        PrepError: an input is missing or empty, kinds differ between inputs, or a
            manifest/Parquet file lacks the configured columns; with ``prior``, a file
            it holds changed and ``cfg.update`` is off.
    """
    s3 = s3 or cfg.s3.options().resolved()
    listings = list_inputs(cfg.inputs, s3, id_root=prior.id_root() if prior else None)
    kinds = {cfg.source if cfg.source != "auto" else _infer_kind(cfg, listing, s3) for listing in listings}
    if len(kinds) > 1:
        raise PrepError(f"inputs {cfg.inputs} mix source kinds {sorted(kinds)}; prepare them as separate tables")
    kind = kinds.pop()
    listed = [f for listing in listings for f in listing.files]
    picked = prior.select(listed, update=cfg.update, remove_missing=cfg.remove_missing) if prior else Selection.everything(listed)
    held = list(prior.metadata.images.labels) if prior and prior.metadata.images else []
    grown = dict(replaced=picked.replaced, unchanged=picked.unchanged, removed=picked.removed, moved=picked.moved, missing=picked.missing)
    if kind == "imagefolder":
        chosen = {f.uri for f in picked.files}
        items: list[FileItem] = []
        folders = []
        for listing in listings:
            found, folder = _imagefolder(listing, chosen)
            items += found
            folders.append(folder)
        labels = _labels(cfg, kind, [i.label for i in items if i.problem is None], held)
        return ImagePlan(kind, _file_chunks(items, cfg), labels, folders if items else [], len(items),
                         file_index=[f.describe() for f in picked.files], **grown)
    if kind == "manifest":  # a chunk never mixes manifests: each records its rows, and --update replaces them
        groups, sources = _manifest(cfg, picked.files, s3)
        labels = _labels(cfg, kind, [i.label for g in groups for i in g if i.problem is None], held)
        cut = [(s.uri, _file_chunks(g, cfg)) for s, g in zip(sources, groups)]
        return ImagePlan(kind, [c for _, cs in cut for c in cs], labels, sources, sum(map(len, groups)),
                         chunk_sources=[uri for uri, cs in cut for _ in cs], **grown)
    if kind == "webdataset":
        chunks: list[Any] = [TarChunk(f.uri, f.ids_from) for f in picked.files]
        labels = LabelMap(tuple(cfg.labels)) if cfg.labels is not None else LabelMap(None)
    else:
        chunks = [c for f in picked.files for c in tables.parquet_chunks(f.uri, f.ids_from, cfg, s3)]
        names = tables.parquet_label_names(uri=listed[0].uri, column=cfg.label_column, s3=s3)
        if cfg.labels is None and names is not None:
            labels = LabelMap(tuple(names))
        else:
            raw = [x for f in picked.files for x in tables.parquet_labels(f.uri, cfg.label_column, s3)]
            labels = _labels(cfg, kind, raw, held)
    return ImagePlan(kind, chunks, labels, [f.describe() for f in picked.files], len(picked.files),
                     chunk_sources=[c.uri for c in chunks], **grown)


def _read_files(chunk: FilesChunk, s3: storage.S3Options | None) -> Iterator[Sample | Reject]:
    """Reads the chunk's files with one ``cat_ranges`` per filesystem (concurrent on S3)."""
    groups: dict[str, list[FileItem]] = {}
    for it in chunk.items:
        if it.problem is None:
            groups.setdefault(storage.scheme(it.uri), []).append(it)
    data: dict[str, Any] = {}
    for items in groups.values():
        fs, _ = storage.filesystem(items[0].uri, s3)
        paths = [storage.filesystem(it.uri, s3)[1] for it in items]
        got = fs.cat_ranges(paths, [None] * len(paths), [None] * len(paths), on_error="return")
        data.update(zip((it.uri for it in items), got))
    for it in chunk.items:
        got = data.get(it.uri)
        if it.problem is not None:
            yield Reject(it.uri, it.position, it.problem)
        elif isinstance(got, (bytes, bytearray)):
            yield Sample(bytes(got), it.uri, FILE_KEY, key_hash(it.key), it.label, it.uri, it.position)
        elif isinstance(got, FileNotFoundError):
            yield Reject(it.uri, it.position, dangling_link(it.uri) or "file not found")
        elif isinstance(got, IsADirectoryError):
            yield Reject(it.uri, it.position, "a directory, not an image file")
        else:  # not a property of the data (access, network): fail rather than change the rows
            raise PrepError(f"{it.uri}: cannot read ({type(got).__name__}: {got}); fix access and rerun")


def read_chunk(chunk: Any, cfg: ImagesConfig, s3: storage.S3Options | None) -> Iterator[Sample | Reject]:
    """Yields the chunk's images in order, as samples or rejects (``s3`` resolved by the driver)."""
    if isinstance(chunk, FilesChunk):
        return _read_files(chunk, s3)
    if isinstance(chunk, TarChunk):
        return shards.read_tar(chunk, s3, cfg.label_column)
    return tables.read_parquet(chunk, cfg, s3)
