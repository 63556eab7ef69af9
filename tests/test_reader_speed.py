"""Issue 9, reader: the causes of the slow reads, each pinned without timing anything.

- per-step cost grew with the splits a rank reads (NumPy calls per split per group);
- every group's outputs landed on fresh pages (a page fault per 4 KiB written);
- an on-the-fly plan paid one Lance ``take`` (~20 ms fixed) per split per read;
- the consumer, holding a ready batch, waited for the next read (first batch at G=1024: 0.38 s).
"""

from __future__ import annotations

import cProfile
import pstats
import threading

import numpy as np
import pytest
import torch

import reader_fixtures as rf
from prep.reader import ReaderDataset
from prep.reader.workers import buffers
from prep.reader.stages.batcher import Batcher
from prep.reader.collate import Chunk, collate_steps
from prep.reader.layouts.materialized import Materialized
from prep.reader.layouts.planned import PlannedSplit
from prep.reader.stages.prefetch import Prefetcher
from prep.reader.schedule import Schedule
from prep.reader.stages.source import ChunkSource, Ragged, SplitTable
from prep.reader.spec import CollateSpec, spec_from_metadata
from prep.plan.order import Share


def _chunk(num_splits: int, b: int, steps: int, seed: int = 0) -> Chunk:
    """A merged chunk of variable-length rows, ``num_splits`` splits one after the other, ``b`` rows a step each."""
    rng = np.random.default_rng(seed)
    n = num_splits * b * steps
    lens = rng.integers(0, 40, n)
    offsets = np.r_[0, np.cumsum(lens)].astype(np.int32)
    values = rng.integers(1, 30000, int(offsets[-1])).astype(np.int32)
    mask = (rng.random(int(offsets[-1])) < 0.7).astype(np.int8)
    return Chunk.of({"id": np.arange(n, dtype=np.uint64), "input_ids": Ragged(offsets, values),
                     "loss_mask": Ragged(offsets, mask)}, np.full((steps, num_splits), b))


def _expected(chunk: Chunk, step: int, b: int, pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One step built row by row: the reference the vectorized build must equal."""
    col, lm = chunk.columns["input_ids"], chunk.columns["loss_mask"]
    num_splits, split_rows = chunk.counts.shape[1], int(chunk.counts[:, 0].sum())
    rows = [s * split_rows + step * b + r for s in range(num_splits) for r in range(b)]
    seqs = [col.values[col.offsets[i]:col.offsets[i + 1]] for i in rows]
    width = max(1, max(len(x) for x in seqs))
    ids = np.full((len(rows), width), pad_id, np.int64)
    labels = np.full((len(rows), width), -100, np.int64)
    for k, (i, x) in enumerate(zip(rows, seqs)):
        ids[k, :len(x)] = x
        labels[k, :len(x)] = np.where(lm.values[col.offsets[i]:col.offsets[i + 1]] != 0, x, -100)
    return np.array(rows, np.uint64), ids, labels


SPEC = CollateSpec(kind="pretrain", pad_id=0)


@pytest.mark.parametrize("num_splits,b", [(1, 4), (3, 2), (32, 1)])
def test_merged_chunk_batches_equal_row_by_row_build(num_splits, b):
    chunk = _chunk(num_splits, b, 5)
    for j, (tensors, ids, tokens) in enumerate(collate_steps(chunk, 1, 5, SPEC), start=1):
        rows, ids_ref, labels_ref = _expected(chunk, j, b, SPEC.pad_id)
        assert np.array_equal(ids, rows)
        assert torch.equal(tensors["input_ids"], torch.from_numpy(ids_ref))
        assert torch.equal(tensors["labels"], torch.from_numpy(labels_ref))
        assert tensors["attention_mask"].sum().item() == tokens


def _calls(chunk: Chunk) -> int:
    buffers.pool.clear()  # the same pool state for both (a recycled block is found by a short search)
    profile = cProfile.Profile()
    profile.enable()
    built = collate_steps(chunk, 0, 4, SPEC)
    profile.disable()
    del built
    return pstats.Stats(profile).total_calls


def test_batch_building_calls_do_not_grow_with_splits():
    """Same rows per step, 2 splits or 64: the same Python work (it was a few calls per split)."""
    assert _calls(_chunk(64, 1, 4)) == _calls(_chunk(2, 32, 4))


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_recycled_block_returns_only_after_its_last_view_dies():
    buffers.pool.clear()
    a = buffers.empty((4, 1000), np.int64)
    a.fill(1)
    address = _address(a)
    held = torch.from_numpy(a[1])
    del a
    b = buffers.empty((4, 1000), np.int64)
    b.fill(2)
    assert _address(b) != address and bool(held.eq(1).all())  # a tensor still views the first block
    del held
    c = buffers.empty((4, 1000), np.int64)
    assert _address(c) == address  # free again: reused, its pages already mapped
    assert buffers.pool.free == [] and buffers.pool.nbytes == 0 and not np.shares_memory(b, c)


def test_a_block_freed_by_the_garbage_collector_while_the_pool_is_taking_does_not_deadlock():
    """Seen as a hung reader I/O thread: ``take`` allocates under the pool's lock, the allocation ran the
    garbage collector, and a batch in a reference cycle released its block on the same thread. Here the
    release runs while this thread holds the lock, as it did then, on a thread that must finish."""
    buffers.pool.clear()

    def take_while_a_block_is_released() -> None:
        with buffers.pool.lock:  # as inside take
            buffers.pool.release(np.empty(1024, np.uint8))  # a finalizer run by the collector

    worker = threading.Thread(target=take_while_a_block_is_released, daemon=True)
    worker.start()
    worker.join(10)  # a guard for a deadlock, not a timing: it finishes at once or never
    assert not worker.is_alive(), "release deadlocked under the lock its own thread holds"
    assert buffers.pool.nbytes == 1024
    buffers.pool.clear()


def test_the_pool_keeps_at_most_pool_bytes_and_counts_what_it_holds(monkeypatch):
    monkeypatch.setattr(buffers, "POOL_BYTES", 3000)
    buffers.pool.clear()
    arrays = [buffers.empty(1000, np.uint8) for _ in range(4)]  # each on a 1,250-byte block
    del arrays
    assert len(buffers.pool.free) == 2 and buffers.pool.nbytes == 2500  # a third block would pass 3,000
    kept = buffers.empty(1000, np.uint8)
    assert len(buffers.pool.free) == 1 and buffers.pool.nbytes == sum(b.nbytes for b in buffers.pool.free) == 1250
    del kept
    assert buffers.pool.nbytes == 2500
    buffers.pool.clear()


def test_a_dataloader_without_batching_keeps_each_batch_type_instead_of_making_another():
    """``DataLoader(ds, batch_size=None)`` copies every batch (torch's ``default_convert``); a copy through
    ``__reduce__`` made a new type per batch, ~45 us a batch of Python (issue 19's read floor)."""
    from torch.utils.data import DataLoader, IterableDataset

    from prep.reader.batch import Batch

    made = [Batch.make({"x": torch.full((2,), i)}, epoch=0, step=i, ids=np.arange(2, dtype=np.uint64), num_tokens=2)
            for i in range(3)]

    class Made(IterableDataset):
        def __iter__(self):
            return iter(made)

    out = list(DataLoader(Made(), batch_size=None))
    assert [type(b) for b in out] == [type(b) for b in made]
    assert [(b.step, int(b["x"][0])) for b in out] == [(0, 0), (1, 1), (2, 2)]


def test_batches_held_by_the_consumer_are_never_overwritten():
    """Recycled output memory must not reach a group while any batch of an older one is alive."""
    path, _ = rf.cached_output("sft48")
    held, snapshots = [], []
    for batch in ReaderDataset(path, global_batch_size=96, read_bytes=1 << 14):
        held.append(batch)
        snapshots.append({k: v.clone() for k, v in batch.items()})
    assert len(held) == 12
    for batch, snap in zip(held, snapshots):
        assert all(torch.equal(batch[k], snap[k]) for k in snap)


class _CountingTable:
    """The real split table; counts its Lance reads."""

    def __init__(self, table: SplitTable) -> None:
        self.table, self.reads = table, 0

    def read(self, rows: np.ndarray):
        self.reads += 1
        return self.table.read(rows)


def test_planned_chunk_reads_every_split_in_one_take(tmp_path):
    table = rf.gsm8k_sft(120)
    prepared = str(tmp_path / "prepared.lance")
    rf.write_table(prepared, table, rf.sft_metadata(120, int(np.asarray(table.column("length")).sum())))
    ds = ReaderDataset(prepared, global_batch_size=8, plan={"num_splits": 8})
    splits = [ds.layout.open_split(0, s, ["id"]) for s in range(8)]
    counting = _CountingTable(splits[0]._table)
    for split in splits:
        split._table = counting
    rows = np.arange(3, 9)
    merged, order = PlannedSplit.read_splits(splits, [rows] * len(splits), None)
    assert counting.reads == 1
    got = merged.column("id").to_numpy()[order].reshape(8, -1)
    ids = table.column("id").to_numpy()
    for s, split in enumerate(splits):
        assert np.array_equal(got[s], ids[split.positions(rows)])


class _Gate:
    """A stage that holds every read after the first until released (storage that fell behind)."""

    def __init__(self, source) -> None:
        self.source, self.open, self.reads = source, threading.Event(), 0

    def reset(self, state) -> None:
        self.source.reset(state)

    def next(self):
        if self.reads >= 1:
            self.open.wait(60)
        self.reads += 1
        return self.source.next()

    def get_state(self):
        return self.source.get_state()

    def shutdown(self) -> None:
        self.source.shutdown()


def test_a_ready_batch_is_handed_over_while_io_is_behind():
    """The consumer got its batch only once the next read arrived (it waited on I/O with a batch in hand)."""
    path, _ = rf.cached_output("sft48")
    layout = Materialized.open(path)
    share = Share(96, 48)
    schedule = Schedule.build(layout.split_rows, layout.epochs, share)
    spec = spec_from_metadata(layout.metadata)
    gate = _Gate(ChunkSource(layout=layout, schedule=schedule, share=share, columns=spec.columns, max_steps=4))
    batcher = Batcher(Prefetcher(gate, depth=2, name="io"), schedule=schedule, spec=spec, ahead=4)
    got: list = []
    consumer = threading.Thread(target=lambda: got.append(batcher.next()), daemon=True)
    consumer.start()
    consumer.join(30)  # a liveness bound, not a timing figure: the gate stays shut for 60 s
    handed_over_while_shut = bool(got) and not gate.open.is_set()
    gate.open.set()
    consumer.join()
    rest = [batcher.next() for _ in range(schedule.total - 1)]
    batcher.shutdown()
    assert handed_over_while_shut
    assert [b.step for b in got + rest] == list(range(6)) * 2
