"""Worker processes that take over from the main process: a first batch that does not wait for them.

A DataLoader worker under ``forkserver`` is forked from a server that first imports torch and
prep.reader: 4-5 s on a 2-core machine, all of it before a loader that waits for its workers
hands the trainer its first batch. The same reader in process delivers it in ~0.1 s. So
:class:`~prep.reader.Loader` reads the first steps itself while its workers start:

1. the workers start in the background (:class:`Starting`); each sends :class:`~prep.reader.workers.shipping.Up`
   and waits;
2. once all are up, the main process names the handoff step ``H``, :data:`LEAD_S` of the
   trainer's steps ahead, and worker ``k`` builds ``H + k, H + k + K, ...``;
3. the main process reads on until a thread that takes the workers' shipments holds the next
   step (``H`` if they were quick; a later one if a worker's first read took longer than the
   lead: the steps before it are dropped), then closes its own pipeline and hands their batches on.

The trainer never waits for the switch longer than for one of this process's own steps.

A batch is the same whoever builds it (a step is arithmetic on the plan), so the sequence and
every state are those of an in-process read. A read that ends before the workers are up is read
in process to its end, and the workers end unused.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

from prep.reader.batch import Batch
from prep.reader.workers.shipping import ReceivedAhead, Receiver, Shipment, Up, in_step_order
from prep.reader.stage import ReaderError
from prep.reader.stats import StatsSnapshot

if TYPE_CHECKING:  # the dataset is handed in; importing it here would load it with the workers' plumbing
    from prep.reader.dataset import ReaderDataset

__all__ = ["Handoff", "Starting", "handed_off", "LEAD_S"]

LEAD_S = 1.0  # how far ahead of the trainer the handoff step is, in its step time: a worker's first read


class Handoff:
    """The step where the workers start, published by the main process to its workers (shared state).

    Args:
        context: the workers' multiprocessing context.
        num_workers: ``K``.
    """

    def __init__(self, context: Any, num_workers: int) -> None:
        self.num_workers = num_workers
        self._go = context.Event()
        self._step = context.Value("q", -1, lock=False)  # written before _go is set, read after

    def wait(self, closed: Any) -> int | None:
        """In a worker that is up: the handoff step, once published (None: the read ended without it)."""
        while not self._go.wait(0.05):
            if closed.is_set():
                return None
        return int(self._step.value)

    def publish(self, index: int) -> None:
        """In the main process: the workers start at global step ``index``."""
        self._step.value = index
        self._go.set()


class Starting:
    """The workers, started in a thread until each has sent :class:`~prep.reader.workers.shipping.Up`.

    Starting them waits for the forkserver's imports, and a worker that fails to start (it dies,
    or its dataset raises) fails the first ``next()`` of the DataLoader: both happen here, off
    the trainer's thread, and :meth:`up` raises the error in the trainer's.

    Args:
        shipments: the workers' DataLoader.
    """

    def __init__(self, shipments: Any) -> None:
        self._shipments, self._lock = shipments, threading.Lock()
        self._iterator: Iterator[Any] | None = None
        self._error: BaseException | None = None
        self._up = self._abandoned = False
        self._thread = threading.Thread(target=self._start, name="prep-workers-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            iterator = iter(self._shipments)
            with self._lock:
                if self._abandoned:
                    return  # dropping the last reference shuts the workers down
                self._iterator = iterator
            for _ in range(self._shipments.num_workers):  # the DataLoader takes one item of each worker in turn
                if not isinstance(next(iterator), Up):
                    raise ReaderError("a worker sent a shipment before it was told where to start")
            self._up = True
        except StopIteration:  # the read ended (closed) before every worker was up
            pass
        except BaseException as error:  # raised in the trainer's thread by up()
            self._error = error

    def up(self) -> bool:
        """Whether every worker waits for the handoff step (never blocks; raises what starting them raised)."""
        if self._error is not None:
            raise self._error
        return self._up

    @property
    def shipments(self) -> Iterator[Shipment]:
        """The workers' shipments, once :meth:`up`."""
        assert self._up and self._iterator is not None
        return self._iterator

    def abandon(self) -> None:
        """Nothing more will be read: the workers shut down once started, without waiting for that here."""
        with self._lock:
            self._abandoned, self._iterator = True, None


def handed_off(dataset: ReaderDataset, starting: Starting, handoff: Handoff, receiver: Receiver,
               on_handoff: Callable[[int, StatsSnapshot], None]) -> Iterator[Batch]:
    """The batches from ``dataset``'s position: this process's own until the workers have the next step in hand,
    then theirs.

    ``on_handoff(index, stats)`` is called at the switch (``index``: the first step from the
    workers) with this process's counters when it stopped reading (its queues emptied).
    """
    schedule = dataset.schedule
    here = dataset.batches()
    asked_at: list[float] = []  # when the trainer asked for each batch after the first
    decided = False  # the workers are up: a handoff step is named, or none (this process reads to the end)
    received: ReceivedAhead | None = None  # the workers' batches from the handoff step on, taken from when it is named
    try:
        try:
            for batch in here:
                index = schedule.index(batch.epoch, batch.step)
                yield batch
                asked_at.append(time.perf_counter())
                if not decided and starting.up():
                    decided = True
                    step_s = (asked_at[-1] - asked_at[0]) / (len(asked_at) - 1) if len(asked_at) > 1 else 0.0
                    lead = max(handoff.num_workers, math.ceil(LEAD_S / step_s) if step_s > 0 else 0)
                    if index + 1 + lead < schedule.total:
                        handoff.publish(index + 1 + lead)
                        received = ReceivedAhead(in_step_order(starting.shipments, receiver, schedule,
                                                               schedule.position(index + 1 + lead)),
                                                 receiver, schedule, dataset.options.prefetch_batches).start()
                if received is not None and received.has(index + 1):  # else this process reads it, as before
                    break
            else:
                return  # read to the end here
        except BaseException:
            here.close()
            raise
        on_handoff(index + 1, dataset.stats().replace(unscanned_rows=0, raw_rows=0, prefetched_rows=0))
        # stopping this process's pipeline joins its threads (a read in progress): not on the trainer's time
        threading.Thread(target=here.close, name="prep-reader-handed-off", daemon=True).start()
        yield from received
    finally:
        if received is not None:
            received.close()
        receiver.close()
        starting.abandon()
