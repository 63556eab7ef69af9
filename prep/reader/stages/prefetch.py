"""Stage: run a source stage on a background thread behind a bounded queue.

Each item is queued with the source's state taken right after producing it, so
this stage's state describes what its consumer took, not what the thread read
ahead. An exception in the thread is queued in order with the items and raised in
the consumer as a :class:`ReaderError` that says where it happened, with the
original exception chained.
"""

from __future__ import annotations

import atexit
import queue
import threading
import traceback
import weakref
from typing import Any, Callable, Generic, TypeVar

from prep.errors import PrepError
from prep.reader.stage import ReaderError, Stage

__all__ = ["Prefetcher"]

T = TypeVar("T")

_RUNNING: "weakref.WeakSet[Prefetcher[Any]]" = weakref.WeakSet()


@atexit.register
def _stop_running() -> None:
    """Stops reader threads before the interpreter tears down: a thread still inside a Lance
    read at exit aborts the process (seen with an iterator abandoned mid-epoch)."""
    for prefetcher in list(_RUNNING):
        prefetcher.shutdown()


class _Done:
    """Queued after the last item (a class, not None: a None item is not 'exhausted')."""


class _Failed:
    def __init__(self, exc: BaseException, where: str) -> None:
        self.exc, self.where, self.trace = exc, where, traceback.format_exc()


class Prefetcher(Generic[T]):
    """Runs ``source.next()`` on a daemon thread, keeping up to ``depth`` items queued.

    Args:
        source: the stage to run ahead.
        depth: items queued at most (memory is bounded by ``depth`` + 2 items).
        name: the thread's name, used in error messages ("reader I/O", ...).
        size: an item's size in rows, for queue-depth figures.
    """

    def __init__(self, source: Stage[T], *, depth: int, name: str, size: Callable[[T], int] = lambda item: 0) -> None:
        if depth < 1:
            raise PrepError(f"{name}: {depth=} must be >= 1")
        self._source, self._depth, self._name, self._size = source, depth, name, size
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.queued_rows = 0
        self.reset(None)

    def reset(self, initial_state: dict[str, Any] | None) -> None:
        """Stops the thread, seeks the source; the thread restarts on the next :meth:`next`."""
        self.shutdown()
        self._source.reset(initial_state)
        self._state = self._source.get_state()
        self._queue: queue.Queue[Any] = queue.Queue(self._depth)  # items with their state, _Done or _Failed
        self._stop = threading.Event()
        self._finished = False
        self.queued_rows = 0

    def start(self) -> None:
        """Starts the thread now (else the first :meth:`next` does)."""
        if self._thread is None and not self._finished:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
            _RUNNING.add(self)

    def next(self) -> T:
        """The next item. Raises StopIteration at the end, ReaderError if the thread failed."""
        if self._finished:
            raise StopIteration
        self.start()
        got = self._get()
        if isinstance(got, _Failed):
            self._finished = True
            exc = got.exc
            if isinstance(exc, ReaderError):  # already says where (from a stage further upstream)
                raise exc
            if isinstance(exc, PrepError):
                raise ReaderError(f"{self._name} thread: {exc}") from exc
            raise ReaderError(f"{self._name} thread failed: {type(exc).__name__}: {exc}\n{got.trace}") from exc
        if got is _Done:
            self._finished = True
            raise StopIteration
        item: T
        item, self._state, rows = got
        with self._lock:
            self.queued_rows -= rows
        return item

    def has_next(self) -> bool:
        """Whether :meth:`next` would answer without waiting for the thread."""
        return self._finished or not self._queue.empty()

    def get_state(self) -> dict[str, Any]:
        return self._state

    def shutdown(self) -> None:
        """Stops and joins the thread, drops what it had queued, shuts the source down."""
        if self._thread is not None:
            self._stop.set()
            while self._thread.is_alive():
                try:
                    self._queue.get(timeout=0.05)
                except queue.Empty:
                    pass
            self._thread.join()
            self._thread = None
            _RUNNING.discard(self)
        self._source.shutdown()

    def _get(self) -> Any:
        while True:
            try:
                return self._queue.get(timeout=0.1)
            except queue.Empty:
                if self._stop.is_set() or not self._thread.is_alive():  # type: ignore[union-attr]
                    if self._queue.empty():
                        raise ReaderError(f"{self._name} thread stopped (the reader was shut down)") from None

    def _put(self, got: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(got, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    item = self._source.next()
                except StopIteration:
                    self._put(_Done)
                    return
                rows = self._size(item)
                with self._lock:
                    self.queued_rows += rows
                if not self._put((item, self._source.get_state(), rows)):
                    return
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
            self._put(_Failed(exc, self._name))
