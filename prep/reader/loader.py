"""A small loader around :class:`~prep.reader.dataset.ReaderDataset`.

Its state is taken from the batches it has *yielded* (each carries its epoch and
step), so it is exact whether the batches were built in this process or in
DataLoader worker processes that prefetch ahead: ``state_dict()`` after consuming
batch N resumes at N+1. It also adds the device feed and a status line that sums
the workers' counters.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import time
import weakref
from multiprocessing import forkserver
from dataclasses import dataclass, field
from typing import Any, Generator, Iterator

import torch
from torch.utils.data import DataLoader

from prep.errors import PrepError
from prep.reader import state as st
from prep.reader.batch import Batch
from prep.reader.dataset import ReaderDataset
from prep.reader.device import DeviceFeed
from prep.reader.workers.handoff import Handoff, Starting, handed_off
from prep.reader.workers.release import Retiring
from prep.reader.workers.shipping import ReceivedAhead, Receiver, WorkerShipments, in_step_order
from prep.reader.spec import TEXT_KINDS
from prep.reader.stats import StatsSnapshot, source_shares, status_line

__all__ = ["Loader", "require_steps", "worker_context"]

_OPEN: "weakref.WeakSet[Generator[Batch, None, None]]" = weakref.WeakSet()  # the Loader iterations not finished yet


@atexit.register
def _close_open() -> None:
    """Closes the iterations still open at interpreter exit, while every module is whole.

    Left open (a trainer that exits mid-epoch), an iteration is otherwise closed when the interpreter
    wipes the globals of the module holding it, which can come after the globals of the modules its
    ``finally`` blocks run (``multiprocessing.synchronize``, ``concurrent.futures``) were set to None
    (Python 3.12 printed ``AttributeError: 'NoneType' object has no attribute 'Empty'``).
    """
    for iteration in list(_OPEN):
        with contextlib.suppress(ValueError):  # running on another thread: that thread closes it
            iteration.close()


def require_steps(dataset: ReaderDataset) -> None:
    """Raises a one-line ``PrepError`` saying why and what to change when ``dataset`` has no full global step.

    An epoch has ``S * (rows of its smallest split) // G`` global steps (:mod:`prep.plan.order`),
    so a global batch larger than that product (512 splits over 300 rows leaves some splits
    empty: none at all) leaves an epoch with no step, and a read of it would end at once without a word.
    """
    schedule, layout = dataset.schedule, dataset.layout
    if schedule.total:
        return
    epoch = schedule.epochs[0]
    rows, splits, G = layout.split_rows[epoch], layout.num_splits, dataset.global_batch_size
    smallest = int(rows.min())
    fix = f"a global batch size of at most {smallest * splits}, or " if smallest else ""
    raise PrepError(
        f"{layout.uri}: epoch {epoch} has no full global step: a global batch of {G} rows takes "
        f"{-(-G // splits)} from each of {splits} splits and the smallest split holds {smallest} rows "
        f"({int(rows.sum())} rows in all); use {fix}fewer splits (--splits when materializing or planning)")


def worker_context() -> Any:
    """``forkserver`` (Lance is not fork-safe) with torch and prep.reader preloaded (:mod:`prep.reader.workers.preload`).

    The server starts now, in the background: its imports (about 1.5 CPU-s) overlap what the
    trainer does before its first batch (building the model), instead of delaying that batch.
    """
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["prep.reader.workers.preload"])
    forkserver.ensure_running()
    return ctx


@dataclass
class _Consumed:
    """What this process's consumer took of one iteration, and how long it waited."""

    started: float = field(default_factory=time.perf_counter)
    wait: float = 0.0
    first: float | None = None  # seconds to the first batch
    rows: int = 0
    tokens: int = 0
    batches: int = 0


class Loader:
    """Iterates a reader with 0 (recommended) or more worker processes; resumable exactly.

    Args:
        dataset: the reader.
        num_workers: DataLoader worker processes (default 0: the reader's own threads overlap
            I/O and batching with training). Workers take every ``num_workers``-th step.
        device: move batches there, one batch ahead on a side CUDA stream (default: leave on host).
        prefetch_factor: shipments (a few steps each, :mod:`prep.reader.workers.shipping`) each worker builds ahead (default 2).
        multiprocessing_context: for workers (default ``forkserver``: Lance is not fork-safe).
        start_in_process: with workers, read the first steps in this process while they start (their
            forkserver imports torch: seconds), and hand over to them at a step named once all are up
            (:mod:`prep.reader.workers.handoff`; :attr:`handoff`). False: every step comes from the workers.
        epoch_per_iter: each ``iter()`` yields the rest of one epoch, so a trainer that counts epochs
            itself (HF Trainer, Lightning) numbers them as the reader does; ``len()`` is then the steps
            of an epoch (the longest, when epochs differ by a step) instead of all epochs'.

    Example:
        >>> loader = Loader(ReaderDataset("out/", global_batch_size=96), device="cuda")  # doctest: +SKIP
        >>> for batch in loader:                                                    # doctest: +SKIP
        ...     model(**batch).loss.backward()
        ...     if step % 100 == 0:
        ...         log.info(loader.status_line())
        ...         save({"reader": loader.state_dict(), ...})
    """

    def __init__(self, dataset: ReaderDataset, *, num_workers: int = 0, device: torch.device | str | None = None,
                 prefetch_factor: int = 2, multiprocessing_context: Any = None, epoch_per_iter: bool = False,
                 start_in_process: bool = True) -> None:
        require_steps(dataset)
        self.dataset, self.num_workers, self.device = dataset, num_workers, device
        self.epoch_per_iter, self.start_in_process = epoch_per_iter, start_in_process
        self._prefetch_factor = prefetch_factor
        # Workers' start method, chosen (and prep's forkserver started) now: see worker_context.
        self._context = multiprocessing_context if multiprocessing_context is not None or not num_workers \
            else worker_context()
        self._position, self._loaded = dataset.position, dataset._pending is not None
        self._workers: dict[int, StatsSnapshot] = {}
        self._mine = _Consumed()
        self._prev = StatsSnapshot()
        self._handoff: tuple[int, int] | None = None
        self._read_here: StatsSnapshot | None = None  # after a handoff: what this process read before it

    def __len__(self) -> int:
        """Batches one ``iter()`` yields from the start of an epoch (or of all epochs) on this rank."""
        steps = self.dataset.schedule.steps
        return max(steps) if self.epoch_per_iter else sum(steps)

    @property
    def position(self) -> tuple[int, int]:
        """``(epoch, step)`` of the next batch: after ``load_state_dict``, where the checkpointed run stopped."""
        return self._position

    @property
    def handoff(self) -> tuple[int, int] | None:
        """``(epoch, step)`` from which this iteration's batches come from the workers (None: from this process so far)."""
        return self._handoff

    @property
    def steps_done(self) -> int:
        """Steps yielded since the start of the first epoch read (a step count a resumed loop continues from)."""
        return self.dataset.schedule.index(*self._position)

    def state_dict(self) -> dict[str, Any]:
        """What this loader has yielded: loading it resumes at the next step."""
        return st.make(self.dataset, *self._position)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at ``state`` on the next ``iter()`` (checked strictly against the dataset)."""
        self._position, self._loaded = st.check(self.dataset, state), True

    def __iter__(self) -> Iterator[Batch]:
        iteration = self._iterate()
        _OPEN.add(iteration)
        return iteration

    def _iterate(self) -> Generator[Batch, None, None]:
        schedule = self.dataset.schedule
        if not self._loaded and self._position == schedule.end:
            self._position = schedule.position(0)
        self._loaded = False
        epoch = self._position[0]
        self.dataset.load_state_dict(self.state_dict())
        batches: Any = self.dataset
        self._handoff, self._read_here = None, None
        if self.num_workers > 0:  # workers send shipments of steps in shared memory; back in step order here
            context = self._context
            receiver = Receiver(context, self.num_workers)
            handoff = Handoff(context, self.num_workers) if self.start_in_process else None
            shipments = DataLoader(WorkerShipments(self.dataset, receiver, handoff), batch_size=None,
                                   num_workers=self.num_workers, prefetch_factor=self._prefetch_factor,
                                   multiprocessing_context=context)
            if handoff is None:
                self._read_here = StatsSnapshot()
                batches = ReceivedAhead(in_step_order(iter(shipments), receiver, schedule, self._position),
                                        receiver, schedule, self.dataset.options.prefetch_batches)
            else:
                batches = handed_off(self.dataset, Starting(shipments), handoff, receiver, self._on_handoff)
        if self.device is not None:
            batches = DeviceFeed(batches, self.device)
        self._workers = {}
        mine = self._mine = _Consumed()
        self._prev = StatsSnapshot()
        it, retiring = iter(batches), Retiring()
        try:
            while True:
                waited = time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    return
                now = time.perf_counter()
                mine.wait += now - waited
                mine.first = mine.first if mine.first is not None else now - mine.started
                mine.rows += batch.num_rows
                mine.tokens += batch.num_tokens
                mine.batches += 1
                if batch.stats is not None:
                    self._workers[batch.worker] = batch.stats
                self._position = schedule.position(schedule.index(batch.epoch, batch.step) + 1)
                retiring.yielded(batch)
                yield batch
                del batch
                if self.epoch_per_iter and self._position[0] != epoch:
                    return
        finally:
            retiring.clear()

    def _on_handoff(self, index: int, read_here: StatsSnapshot) -> None:
        self._handoff, self._read_here = self.dataset.schedule.position(index), read_here

    def stats(self) -> StatsSnapshot:
        """Counters as the consumer sees them (with workers: theirs summed, and this process's before a handoff)."""
        mine = self._mine
        base = self.dataset.stats() if self._read_here is None else self._read_here
        for snap in self._workers.values():
            base = base.merged(snap)
        in_flight = base.consumed_rows - mine.rows if self.num_workers > 0 else 0
        return base.replace(wall_s=time.perf_counter() - mine.started, first_batch_s=mine.first, wait_s=mine.wait,
                            prefetched_rows=base.prefetched_rows + max(0, in_flight), consumed_rows=mine.rows,
                            consumed_tokens=mine.tokens, consumed_batches=mine.batches)

    def status_line(self) -> str:
        """``epoch 0 of 3 step 100 | 11,101 tok/s | 134.4 rows/s | 0/0/48704/3264 | gpu-bound`` (since the last call)."""
        cur = self.stats()
        prev, self._prev = self._prev, cur
        epoch, step = self.dataset.schedule.consumed(self._position)
        consumer = "gpu" if self.device is not None and torch.device(self.device).type == "cuda" else "consumer"
        line = status_line(prev, cur, epoch=epoch, num_epochs=len(self.dataset.layout.epochs), step=step,
                           tokens=self.dataset.spec.kind in TEXT_KINDS, consumer=consumer)
        return f"{line} | {source_shares(cur)}" if cur.source_rows else line
