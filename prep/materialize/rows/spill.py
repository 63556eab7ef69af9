"""Rows that do not fit the memory budget: a two-pass external shuffle through spill files.

When the selected rows of a run are more than one holder may keep in memory
(:class:`prep.materialize.budget.Budget`) and clumps are small (a Lance take per row
costs ~5x a scan), a run does not read the table once per group of splits. Instead:

1. **route**: the selected rows are cut into segments (contiguous position ranges);
   each segment is read once, in order, a budget's read at a time, and each row goes
   to the spill file of its *group* (contiguous splits whose rows fit the budget),
   with its position: ``ROOT/seg-IIIIII/g-GGGGG.arrow`` (Arrow IPC, uncompressed),
   then ``ROOT/seg-IIIIII.done``. Segments run in parallel, on every node.
2. **write**: each group's files (its rows, in position order) are read back once
   and held, and every epoch of the group's splits is taken from them
   (:mod:`prep.materialize.rows.held`). A single split larger than the budget is taken
   in parts (:func:`split_parts`): its spill is bucketed by part of the epoch's read
   order, then each part is held alone.

The table is read once per run whatever its size; the spill is written once and read
once per run (twice, with one more write, for a split above the budget). ``ROOT`` is
``OUT/_work/spill`` (or ``SPILL_DIR/prep-spill-<fingerprint>``, or a folder in this
node's temp dir for an object-store output on one node) and holds a marker naming the
plan and the layout: a killed run's finished segments are kept by its rerun, anything
else there is written again. The folder is removed when the run's splits are written.
A full disk is one line naming the folder; the spill is removed, the output stays as it was.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from prep import plan
from prep.contracts.materialized import WORK
from prep.errors import PrepError
from prep.io import storage
from prep.materialize.faults import kill_point
from prep.materialize.rows.held import Held, rows_at
from prep.materialize.resolved import ResolvedTable, dataset
from prep.materialize.rows.selected import iter_range

__all__ = ["SpillLayout", "spill_root", "route_segment", "read_group", "split_parts", "remove_spill", "POSITION"]

POSITION = "__prep_position"  # the spilled rows' selected positions (a column of the spill files only)
MARKER = "_prep_spill.json"
SPILL_PREFIX = "prep-spill-"
BLOCK_BYTES = 1 << 20  # spilled rows filtered at once when a split is written in parts


@dataclass(frozen=True)
class SpillLayout:
    """Where a run spills and how: the plan it is for, its segments (position ranges) and groups (split ranges).

    >>> lay = SpillLayout("abc", ((0, 10), (10, 20)), ((0, 3), (3, 6)))
    >>> SpillLayout.from_json(lay.to_json()) == lay, lay.group_of(np.arange(6)).tolist()
    (True, [0, 0, 0, 1, 1, 1])
    """

    fingerprint: str
    segments: tuple[tuple[int, int], ...]
    groups: tuple[tuple[int, int], ...]

    def to_json(self) -> dict:
        return {"fingerprint": self.fingerprint, "segments": [list(s) for s in self.segments],
                "groups": [list(g) for g in self.groups]}

    @classmethod
    def from_json(cls, doc: object) -> "SpillLayout":
        """Strict: exactly these keys, pairs of ints. Raises ValueError on anything else."""
        if not isinstance(doc, dict) or set(doc) != {"fingerprint", "segments", "groups"} or \
                not isinstance(doc["fingerprint"], str):
            raise ValueError(f"not a spill marker: {str(doc)[:200]}")

        def pairs(v: object) -> tuple[tuple[int, int], ...]:
            if not isinstance(v, list) or not all(isinstance(p, list) and len(p) == 2 and
                                                  all(type(x) is int for x in p) for p in v):
                raise ValueError(f"not a list of [start, stop] pairs: {str(v)[:200]}")
            return tuple((p[0], p[1]) for p in v)

        return cls(doc["fingerprint"], pairs(doc["segments"]), pairs(doc["groups"]))

    def group_of(self, splits: np.ndarray) -> np.ndarray:
        """The group of each split."""
        starts = np.array([g[0] for g in self.groups])
        return np.searchsorted(starts, splits, side="right") - 1


def spill_root(job: ResolvedTable, spill_dir: str | None, nodes: int) -> str:
    """Where this run spills: ``spill_dir/prep-spill-<fingerprint>`` when given, else the output's work folder,
    except for an object-store output on one node, which spills to this node's temp dir."""
    if spill_dir:
        base = spill_dir if storage.is_remote(spill_dir) else os.path.abspath(spill_dir)
        return storage.join(base, SPILL_PREFIX + job.fingerprint)
    if storage.is_remote(job.output) and nodes == 1:
        return os.path.join(tempfile.gettempdir(), SPILL_PREFIX + job.fingerprint)
    return storage.join(job.output, WORK, "spill")


def open_spill(root: str, layout: SpillLayout, s3: storage.S3Options) -> set[int]:
    """Makes ``root`` this layout's spill folder; returns the segments a killed run of the same layout finished.

    A folder with another layout's marker (an earlier plan or budget) is emptied; a folder that exists
    without prep's marker is refused (prep removes only what it wrote).
    """
    fs, path = storage.filesystem(root, s3)
    marker = f"{path.rstrip('/')}/{MARKER}"
    if fs.exists(path):
        try:
            old = SpillLayout.from_json(json.loads(fs.cat_file(marker)))
        except (FileNotFoundError, ValueError) as exc:
            if fs.ls(path, detail=False):
                raise PrepError(f"spill folder {root} exists and was not written by prep ({exc}): "
                                "choose another --spill-dir or remove it yourself") from None
            old = None
        if old == layout:
            names = [n.rstrip("/").rsplit("/", 1)[-1] for n in fs.ls(path, detail=False)]
            return {int(n[4:-5]) for n in names if n.startswith("seg-") and n.endswith(".done")}
        fs.rm(path, recursive=True)
    fs.makedirs(path, exist_ok=True)
    with fs.open(marker, "w") as f:
        f.write(json.dumps(layout.to_json()))
    return set()


def remove_spill(root: str, s3: storage.S3Options) -> None:
    """Removes the spill folder (only one holding prep's marker)."""
    fs, path = storage.filesystem(root, s3)
    if fs.exists(f"{path.rstrip('/')}/{MARKER}"):
        fs.rm(path, recursive=True)


def _spill_schema(job: ResolvedTable) -> pa.Schema:
    schema = dataset(job, job.source, job.version).schema
    return pa.schema([schema.field(c) for c in job.columns] + [pa.field(POSITION, pa.uint64())])


def route_segment(job: ResolvedTable, layout: SpillLayout, root: str, index: int, hash_keys: np.ndarray | None,
                  read_rows: int, row_bytes: int) -> int:
    """Route, one segment: its rows read in order, ``read_rows`` (of ``row_bytes``) at a time, each appended to
    its group's file.

    The files are written to a local folder (the spill folder itself when it is local) and uploaded when
    the segment is done; ``seg-IIIIII.done`` is written last. Returns the segment's index.

    Raises:
        PrepError: no space left where the spill goes (one line naming it).
    """
    start, stop = layout.segments[index]
    remote = storage.is_remote(root)
    local = tempfile.mkdtemp(prefix="prep-spill-") if remote else os.path.join(root, f"seg-{index:06d}")
    schema, writers, sinks, files = _spill_schema(job), {}, {}, {}
    source = dataset(job, job.source, job.version)
    try:
        if not remote:
            shutil.rmtree(local, ignore_errors=True)  # a killed attempt's files
            os.makedirs(local)
        a = start
        for table in iter_range(job, source, start, stop, read_rows, row_bytes):
            pos = np.arange(a, a + table.num_rows)
            a += table.num_rows
            owner = layout.group_of(plan.assign_rows(positions=pos, hash_keys=hash_keys, **job.split_kwargs()))
            order = np.argsort(owner, kind="stable")
            bounds = np.searchsorted(owner[order], np.arange(len(layout.groups) + 1))
            grouped = rows_at([table], pos, pos[order]) if len(layout.groups) > 1 else table
            grouped = grouped.append_column(POSITION, pa.array(pos[order].astype(np.uint64)))
            for g in np.flatnonzero(np.diff(bounds)):
                if g not in writers:
                    files[g] = os.path.join(local, f"g-{g:05d}.arrow")
                    sinks[g] = pa.OSFile(files[g], "wb")
                    writers[g] = pa.ipc.new_stream(sinks[g], schema)
                writers[g].write_table(grouped.slice(int(bounds[g]), int(bounds[g + 1] - bounds[g])))
            del table, grouped
        for w in writers.values():
            w.close()
        writers.clear()
        for f in sinks.values():
            f.close()
        if remote:
            fs, path = storage.filesystem(root, job.s3)
            for g, name in files.items():
                fs.put_file(name, f"{path.rstrip('/')}/seg-{index:06d}/g-{g:05d}.arrow")
        _write_done(root, index, job.s3)
        kill_point("spill")
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            shutil.rmtree(local, ignore_errors=True)
            raise PrepError(f"no space left on the device of {root if not remote else local} while spilling rows "
                            f"[{start}, {stop}): free space there or pass --spill-dir on a larger disk "
                            "(the spill takes about the selected rows' Arrow size)") from None
        raise
    finally:
        for w in [*writers.values(), *sinks.values()]:  # after a failure: close without raising again (a full
            try:                                         # disk fails the flush too); closing twice does nothing
                w.close()
            except OSError:
                pass
        if remote:
            shutil.rmtree(local, ignore_errors=True)
    return index


def _write_done(root: str, index: int, s3: storage.S3Options) -> None:
    fs, path = storage.filesystem(root, s3)
    with fs.open(f"{path.rstrip('/')}/seg-{index:06d}.done", "w") as f:
        f.write("{}")


def _group_files(root: str, layout: SpillLayout, group: int, s3: storage.S3Options) -> tuple[object, list[str]]:
    """The filesystem of ``root`` and the spill files of ``group`` there, in segment order."""
    fs, path = storage.filesystem(root, s3)
    names = [f"{path.rstrip('/')}/seg-{i:06d}/g-{group:05d}.arrow" for i in range(len(layout.segments))]
    return fs, [n for n in names if fs.exists(n)]


def _batches(fs: object, name: str, remote: bool) -> Iterator[pa.RecordBatch]:
    """The batches of one spill file, read one at a time (a local file through the OS, no copy kept)."""
    with (fs.open(name, "rb") if remote else pa.OSFile(name, "rb")) as f:
        yield from pa.ipc.open_stream(f)


def _held(batches: Sequence[pa.RecordBatch], schema: pa.Schema) -> Held:
    """Spilled rows (in position order) held as one piece: a group's files hold a small batch per route read,
    and a take per piece would cost more than this one copy."""
    rows = pa.Table.from_batches(batches, schema=schema).combine_chunks()
    positions = np.asarray(rows.column(POSITION)).astype(np.int64)
    return Held([rows.drop_columns([POSITION])], positions)


def read_group(job: ResolvedTable, root: str, layout: SpillLayout, group: int) -> Held:
    """Write, one group: all its spilled rows, read back once, held in position order."""
    remote = storage.is_remote(root)
    fs, names = _group_files(root, layout, group, job.s3)
    batches = [b for name in names for b in _batches(fs, name, remote)]
    return _held([b for b in batches if b.num_rows], _spill_schema(job))


def split_parts(job: ResolvedTable, root: str, layout: SpillLayout, group: int, order: np.ndarray,
                parts: int) -> Iterator[pa.RecordBatch]:
    """A split above the budget (its group holds it alone), in read order ``order``, as ``parts`` consecutive parts
    of the order, each held alone: the split's spill is read once and each row appended to the file of its part
    (on this node's disk), then each part's file is read back once. So the cost is linear in the split whatever
    its size against the budget (two reads and a write of it, not one read per part)."""
    if not len(order):
        return
    remote = storage.is_remote(root)
    fs, names = _group_files(root, layout, group, job.s3)
    schema = _spill_schema(job)
    per = -(-len(order) // parts)
    by_position = np.argsort(order, kind="stable")  # the rank of each position in the read order, by position
    ranked = order[by_position]
    with tempfile.TemporaryDirectory(prefix="prep-parts-") as local:
        writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
        try:
            for block in _blocks(fs, names, remote, schema):
                pos = np.asarray(block.column(POSITION)).astype(np.int64)
                part = by_position[np.searchsorted(ranked, pos)] // per
                grouped = np.argsort(part, kind="stable")  # by part, each part's rows still in position order
                rows = rows_at([block.drop_columns([POSITION])], pos, pos[grouped])
                rows = rows.append_column(POSITION, pa.array(pos[grouped].astype(np.uint64)))
                bounds = np.searchsorted(part[grouped], np.arange(parts + 1))
                for k in np.flatnonzero(np.diff(bounds)):
                    if k not in writers:
                        writers[k] = pa.ipc.new_stream(os.path.join(local, f"part-{k:06d}.arrow"), schema)
                    writers[k].write_table(rows.slice(int(bounds[k]), int(bounds[k + 1] - bounds[k])))
        finally:
            for w in writers.values():
                w.close()
        for k, i in enumerate(range(0, len(order), per)):
            name = os.path.join(local, f"part-{k:06d}.arrow")
            kept = list(_batches(None, name, False)) if k in writers else []
            yield from _held(kept, schema).batches(order[i:i + per], job.read_rows)


def _blocks(fs: object, names: Sequence[str], remote: bool, schema: pa.Schema) -> Iterator[pa.Table]:
    """The rows of spill files ``names``, in order, as tables of ~:data:`BLOCK_BYTES` (a route wrote a small
    batch per read: one filter per block instead of one per batch)."""
    batches, size = [], 0
    for name in names:
        for b in _batches(fs, name, remote):
            batches.append(b)
            size += b.nbytes
            if size >= BLOCK_BYTES:
                yield pa.Table.from_batches(batches, schema=schema)
                batches, size = [], 0
    if batches:
        yield pa.Table.from_batches(batches, schema=schema)
