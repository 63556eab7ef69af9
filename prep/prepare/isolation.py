"""Per-item isolation: a crash or a hang on one input costs that input, never the job.

A native decoder can segfault or abort on a malformed file, and some inputs make
code spin; a Python ``try`` catches neither. So each Ray worker process (each worker
thread of the local executor) runs its chunks in a long-lived *sandbox* child process
(started once, with ``python -m``: no fork of a process that holds Lance state) and
watches it:

- The chunk worker walks its items through :meth:`Progress.items`, which marks the
  index of the item in hand in a shared 8-byte page (no message per item, so no
  cost on clean data) and ``-1`` between items.
- The parent waits for the result. If the child dies (any signal, an OOM kill, an
  exit) while item ``i`` is marked, or item ``i`` stays marked longer than
  ``item_timeout_s``, the child is killed if need be, a fresh one is started, and the
  chunk is run again with item ``i`` *poisoned*: ``Progress.items`` hands it to the
  worker with the reason, and the worker records it as a reject where it records
  every other bad input. The output is therefore exactly a clean run's, minus those
  items, and rows in = rows written + rows rejected still holds.
- At most ``max_bad_items_per_chunk`` items per chunk may be poisoned, and a death
  outside any item (reading or writing the chunk) is retried ``max_task_retries``
  times; past either bound the chunk fails with one line.

``PREP_TEST_FAULTS`` (tests only) makes the sandbox crash or hang on named items,
e.g. ``segv:ants/x.jpg;hang:bees/y.jpg;exit:BOOM``: every name that contains the
text after the colon. The driver reads it and ships it with the chunks.
"""

from __future__ import annotations

import atexit
import mmap
import os
import pickle
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterable, Iterator, TypeVar

from prep.runtime.config import JobConfig
from prep.errors import PrepError
from prep.runtime.ray_cluster import WORKER_ENV

__all__ = ["Limits", "Progress", "NO_PROGRESS", "FAULTS_ENV", "run_isolated", "stop_sandboxes"]

FAULTS_ENV = "PREP_TEST_FAULTS"
_IDLE = -1
_MARK = struct.Struct("q")
T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """How long an item may take and how many failures a chunk may absorb (see :class:`JobConfig`)."""

    item_timeout_s: float = 60.0
    max_bad_items_per_chunk: int = 16
    max_task_retries: int = 3

    @classmethod
    def of(cls, cfg: JobConfig) -> "Limits":
        return cls(cfg.item_timeout_s, cfg.max_bad_items_per_chunk, cfg.max_task_retries)


class Progress:
    """What a chunk worker walks its items through; this base class only passes them on.

    Workers call it outside a sandbox too (tests, benchmarks): then no item is poisoned.
    """

    def items(self, items: Iterable[T], name: Callable[[T], str] = str) -> Iterator[tuple[T, str | None]]:
        """Yields ``(item, poison)``: ``poison`` is None, or why the item must be rejected unprocessed.

        Args:
            items: the chunk's items, in their deterministic order.
            name: names an item for ``PREP_TEST_FAULTS`` (tests only).
        """
        for item in items:
            yield item, None


NO_PROGRESS = Progress()


class _Tracked(Progress):
    """The sandbox side: marks the item in hand, hands poisoned items over with their reason."""

    def __init__(self, page: mmap.mmap, poison: dict[int, str], faults: str | None) -> None:
        self._page, self._poison = page, poison
        self._faults = [tuple(f.split(":", 1)) for f in faults.split(";") if ":" in f] if faults else []

    def items(self, items: Iterable[T], name: Callable[[T], str] = str) -> Iterator[tuple[T, str | None]]:
        page, poison = self._page, self._poison
        for i, item in enumerate(items):  # the next item is read while the mark says idle
            reason = poison.get(i)
            _MARK.pack_into(page, 0, i)
            if self._faults and reason is None:
                _inject(self._faults, name(item))
            yield item, reason
            _MARK.pack_into(page, 0, _IDLE)
        _MARK.pack_into(page, 0, _IDLE)


def _inject(faults: list[tuple[str, ...]], name: str) -> None:
    for action, needle in faults:
        if needle in name:
            if action == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            if action == "hang":
                while True:
                    time.sleep(3600)
            if action == "exit":
                os._exit(3)


def _dumps(obj: Any) -> bytes:
    """Plain pickle, else Ray's cloudpickle for what only it can pickle (classes defined in ``__main__``)."""
    try:
        return pickle.dumps(obj)
    except (pickle.PicklingError, AttributeError, TypeError):
        from ray import cloudpickle

        return cloudpickle.dumps(obj)


def _describe_death(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else "unknown"
        hint = "; out of memory?" if -code == signal.SIGKILL else ""
        return f"worker process crashed with signal {-code} ({name}{hint})"
    return f"worker process exited with status {code}"


class _Sandbox:
    """The parent side: one child process, restarted after it dies or is killed."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._page: mmap.mmap | None = None

    def _start(self) -> None:
        parent, child = os.pipe(), os.pipe()  # requests parent->child, replies child->parent
        page_file = tempfile.TemporaryFile()
        page_file.write(b"\0" * _MARK.size)
        page_file.flush()
        # One thread per sandbox (the task's CPU share), Lance's log quiet: as Ray's workers get them.
        env = {**os.environ, **WORKER_ENV, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        fds = (parent[0], child[1], page_file.fileno())
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "prep.prepare.isolation", *map(str, fds)], pass_fds=fds, env=env, close_fds=True
        )
        os.close(parent[0])
        os.close(child[1])
        self._send, self._conn = Connection(parent[1], readable=False), Connection(child[0], writable=False)
        self._page = mmap.mmap(page_file.fileno(), _MARK.size)
        page_file.close()

    def _stop(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._send.close()
            self._conn.close()
            self._page.close()
        self._proc = None

    def _attempt(self, request: bytes, timeout: float) -> tuple[str, Any]:
        """Runs one request: ``("ok", value)``, ``("error", text)``, or ``("died", (item, reason))``."""
        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            self._start()
        _MARK.pack_into(self._page, 0, _IDLE)
        try:
            self._send.send_bytes(request)
        except OSError:  # died while idle: start afresh
            self._stop()
            return "died", (_IDLE, "worker process died before the chunk started")
        seen, since = _IDLE, time.monotonic()
        while True:
            if self._conn.poll(min(0.25, timeout / 4)):
                try:
                    return pickle.loads(self._conn.recv_bytes())
                except EOFError:
                    break
            item = _MARK.unpack_from(self._page, 0)[0]
            now = time.monotonic()
            if item != seen:
                seen, since = item, now
            elif item != _IDLE and now - since > timeout:
                self._stop()
                return "died", (item, f"timed out after {timeout:g} s (item_timeout_s)")
            if self._proc.poll() is not None and not self._conn.poll():
                break
        item = _MARK.unpack_from(self._page, 0)[0]
        code = self._proc.wait()
        self._stop()
        return "died", (item, _describe_death(code))

    def run(self, fn: Callable[..., Any], kwargs: dict[str, Any], limits: Limits, faults: str | None) -> Any:
        """``fn(progress, **kwargs)`` in the child, poisoning items that crash or hang it.

        Raises:
            PrepError: too many bad items, repeated deaths outside items, or ``fn`` raised.
        """
        poison: dict[int, str] = {}
        deaths = 0
        while True:
            kind, value = self._attempt(_dumps((fn, kwargs, poison, faults)), limits.item_timeout_s)
            if kind == "ok":
                return value
            if kind == "error":
                raise PrepError(value)
            item, reason = value
            if item == _IDLE:
                deaths += 1
                if deaths > limits.max_task_retries:
                    raise PrepError(f"{reason} outside any single item (reading or writing the chunk) {deaths} times (max_task_retries={limits.max_task_retries})")
                continue
            poison[item] = reason
            if len(poison) > limits.max_bad_items_per_chunk:
                raise PrepError(f"{len(poison)} items crashed or timed out in one chunk (max_bad_items_per_chunk={limits.max_bad_items_per_chunk}); last: {reason}")


_SANDBOXES = threading.local()  # one per thread: a Ray worker's task thread, each local worker thread
_STARTED: list[_Sandbox] = []


@atexit.register
def stop_sandboxes() -> None:
    """Stops (and waits for) every sandbox this process started, so their CPU time is its own."""
    for sandbox in _STARTED:
        sandbox._stop()


def run_isolated(fn: Callable[..., Any], kwargs: dict[str, Any], limits: Limits, faults: str | None = None) -> Any:
    """Runs ``fn(progress, **kwargs)`` in this thread's sandbox child (see the module docstring).

    The sandbox is started on the thread's first call and kept: a Ray worker, or a worker
    thread of the local executor's pool, pays for its imports (torch, Lance) once.

    Args:
        fn: a module-level function taking a :class:`Progress` first.
        kwargs: its other arguments (picklable).
        limits: the job's limits.
        faults: the ``PREP_TEST_FAULTS`` value the driver saw (tests only).

    Returns:
        What ``fn`` returned.

    Raises:
        PrepError: the chunk cannot finish within the limits; one line saying why.
    """
    sandbox = getattr(_SANDBOXES, "sandbox", None)
    if sandbox is None:
        sandbox = _SANDBOXES.sandbox = _Sandbox()
        _STARTED.append(sandbox)
    return sandbox.run(fn, kwargs, limits, faults)


def _child(request_fd: int, reply_fd: int, page_fd: int) -> None:
    """The sandbox's loop: serve requests until the parent goes away."""
    if sys.platform.startswith("linux"):  # die with the parent, even when stuck in an item
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    requests, replies = Connection(request_fd, writable=False), Connection(reply_fd, readable=False)
    page = mmap.mmap(page_fd, _MARK.size)
    while True:
        try:
            request = requests.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            fn, kwargs, poison, faults = pickle.loads(request)
            reply = ("ok", fn(_Tracked(page, poison, faults), **kwargs))
        except Exception as exc:  # fn reports its own errors; this is a failure of the sandbox itself
            reply = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        _MARK.pack_into(page, 0, _IDLE)
        replies.send_bytes(pickle.dumps(reply))


if __name__ == "__main__":
    _child(*map(int, sys.argv[1:4]))
