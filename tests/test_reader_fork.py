"""ReaderDataset under a bare DataLoader with worker processes, for every start method: the same
batches as num_workers=0, run after run, also when the parent read Lance first (issue 8, finding 6:
fork after Lance use segfaulted 2 runs in 10)."""

from __future__ import annotations

import multiprocessing
import os
import pickle

import numpy as np
import pytest
from torch.utils.data import DataLoader

import reader_fixtures as rf
from prep.reader import ReaderDataset
from prep.reader.loader import worker_context

pytestmark = pytest.mark.skipif(not rf.GSM8K.exists(), reason=f"real data not found at {rf.SHARED_DATA}")
RUNS = 10


@pytest.fixture(scope="module", params=["materialized", "planned"])
def layout(request, tmp_path_factory):
    """``(kwargs for ReaderDataset, reference ids per batch read with num_workers=0)``."""
    if request.param == "materialized":
        path, _ = rf.cached_output("sft4")
        kwargs = {"path": path, "global_batch_size": 4}
    else:
        table = rf.gsm8k_sft(120)
        path = str(tmp_path_factory.mktemp("fork") / "prepared.lance")
        rf.write_table(path, table, rf.sft_metadata(120, int(np.asarray(table.column("length")).sum())))
        kwargs = {"path": path, "global_batch_size": 12, "plan": {"num_splits": 6, "seed": 3}, "epochs": 2}
    reference = [(b.epoch, b.step, b.ids.copy()) for b in ReaderDataset(**kwargs)]
    assert len(reference) > 4
    return kwargs, reference


def read(ds: ReaderDataset, context: str, num_workers: int) -> list[tuple[int, int, np.ndarray]]:
    # forkserver: prep's (the server preloads torch and prep.reader, as Loader's does), not one whose every worker
    # imports them again (~2.5 CPU-s a worker); the forkserver is one per process, so which one a test got depended
    # on the tests before it
    mp_context = worker_context() if context == "forkserver" else multiprocessing.get_context(context)
    loader = DataLoader(ds, batch_size=None, num_workers=num_workers, timeout=120, multiprocessing_context=mp_context)
    return [(b.epoch, b.step, b.ids.copy()) for b in loader]


def assert_same(got, reference, what: str) -> None:
    assert [(e, t) for e, t, _ in got] == [(e, t) for e, t, _ in reference], what
    for (_, _, a), (_, _, b) in zip(got, reference):
        np.testing.assert_array_equal(a, b, err_msg=what)


@pytest.mark.parametrize("context", ["fork", "forkserver"])
@pytest.mark.slow
def test_worker_processes_yield_the_in_process_batches_every_run(layout, context):
    kwargs, reference = layout
    runs = RUNS if context == "fork" else 3  # fork is the start method that crashed; forkserver starts clean
    for run in range(runs):
        ds = ReaderDataset(**kwargs)
        assert_same(read(ds, context, num_workers=1 + run % 2), reference, f"{context} run {run}")


@pytest.mark.slow
def test_fork_after_the_parent_iterated_and_asked_for_state(layout):
    kwargs, reference = layout
    for run in range(RUNS):
        ds = ReaderDataset(**kwargs)
        if run % 2:
            assert_same([(b.epoch, b.step, b.ids.copy()) for b in ds], reference, "in the parent")
        else:  # part of a pass: the parent's pipeline threads and datasets are alive at the fork
            it = iter(ds)
            next(it)
            ds.load_state_dict(ds.state_dict() | {"epoch": reference[0][0], "step": reference[0][1]})
        ds.state_dict(), ds.dropped_rows, len(ds.schedule.steps)
        assert_same(read(ds, "fork", num_workers=1), reference, f"run {run}")


def test_pickled_dataset_carries_no_open_handle(layout):
    kwargs, reference = layout
    ds = ReaderDataset(**kwargs)
    next(iter(ds))
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._pipeline is None
    assert not any("lance" in type(v).__module__ for v in vars(copy.layout).values())
    assert_same(list((b.epoch, b.step, b.ids.copy()) for b in ReaderDataset(**kwargs)), reference, "fresh")
    assert os.getpid() == ds._pid
