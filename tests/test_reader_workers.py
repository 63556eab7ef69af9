"""prep.reader with DataLoader worker processes: step order and exact resume despite worker prefetch."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import reader_fixtures as rf
from prep.reader import Loader, ReaderDataset
from prep.reader.shipping import Receiver, WorkerShipments, in_step_order

pytestmark = pytest.mark.skipif(not rf.GSM8K.exists(), reason=f"real data not found at {rf.SHARED_DATA}")
G = 96


@pytest.fixture(scope="module")
def out48():
    path, _ = rf.cached_output("sft48")
    batches = list(ReaderDataset(path, global_batch_size=G))
    reference = [(b.epoch, b.step, b.ids.copy()) for b in batches]
    return path, reference, batches


def consume(loader, stop=None):
    got = []
    for batch in loader:
        got.append((batch.epoch, batch.step, batch.ids.copy()))
        if len(got) == stop:
            break
    return got


@pytest.mark.parametrize("num_workers,stops", [(1, [6]), (2, [3, 12])], ids=["1-worker", "2-workers"])
def test_resume_with_worker_processes_matches_uninterrupted_run(out48, num_workers, stops):
    path, reference, _ = out48
    for stop in stops:  # 6: epoch boundary, 3: inside an epoch, 12: the last batch
        loader = Loader(ReaderDataset(path, global_batch_size=G), num_workers=num_workers)
        first = consume(loader, stop)
        state = loader.state_dict()  # workers have prefetched past `stop`; the state must not have
        again = Loader(ReaderDataset(path, global_batch_size=G), num_workers=num_workers)
        again.load_state_dict(state)
        rest = consume(again)
        assert [(e, t) for e, t, _ in first + rest] == [(e, t) for e, t, _ in reference], f"stop={stop}"
        for (_, _, a), (_, _, b) in zip(first + rest, reference):
            np.testing.assert_array_equal(a, b)
        if rest:
            assert again.status_line().startswith("epoch 1 of 2 step 6 | ")


def test_bare_dataloader_with_two_workers_yields_steps_in_order_and_state_after_a_batch(out48):
    path, reference, batches = out48
    ds = ReaderDataset(path, global_batch_size=G)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=multiprocessing.get_context("forkserver"))
    got, workers = [], []
    for batch, want in zip(loader, batches):
        got.append((batch.epoch, batch.step, batch.ids.copy(), ds.state_after(batch)))
        workers.append(batch.worker)
        assert batch.keys() == want.keys() and all(torch.equal(batch[k], want[k]) for k in want)
    assert [(e, t) for e, t, _, _ in got] == [(e, t) for e, t, _ in reference]
    assert workers == [0, 1] * 6  # worker k builds steps k, k+2, ...: the round robin restores step order
    for (_, _, a, _), (_, _, b) in zip(got, reference):
        np.testing.assert_array_equal(a, b)
    assert [(s["epoch"], s["step"]) for *_, s in got[4:7]] == [(0, 5), (1, 0), (1, 1)]


@pytest.mark.parametrize("slots", [1, 2])
def test_batches_held_across_a_whole_read_never_change_while_workers_reuse_their_buffers(out48, slots):
    """Workers rewrite a few shared buffers; a batch the consumer still holds must not be one of them.

    One or two buffers per worker force every buffer to be rewritten while the consumer holds every
    batch read so far (the race that once handed a resumed 2-worker read another batch's bytes).
    """
    path, _, _ = out48
    ds = ReaderDataset(path, global_batch_size=48)
    want = list(ReaderDataset(path, global_batch_size=48))
    context = multiprocessing.get_context("forkserver")
    receiver = Receiver(context, 2, slots=slots)
    shipments = DataLoader(WorkerShipments(ds, receiver), batch_size=None, num_workers=2, multiprocessing_context=context)
    held = list(in_step_order(iter(shipments), receiver, ds.schedule, ds.position))
    assert [(b.epoch, b.step) for b in held] == [(b.epoch, b.step) for b in want] and len(held) == 24
    for got, ref in zip(held, want):
        np.testing.assert_array_equal(got.ids, ref.ids)
        assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref), (got.epoch, got.step)


def test_batches_held_through_loader_with_two_workers_equal_an_in_process_read(out48):
    path, _, _ = out48
    want = list(ReaderDataset(path, global_batch_size=48))
    held = list(Loader(ReaderDataset(path, global_batch_size=48), num_workers=2))
    assert len(held) == len(want) == 24
    for got, ref in zip(held, want):
        np.testing.assert_array_equal(got.ids, ref.ids)
        assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref), (got.epoch, got.step)
