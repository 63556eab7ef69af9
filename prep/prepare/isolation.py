"""Per-item isolation: a crash or a hang on one input costs that input, never the job.

A native decoder can segfault or abort on a malformed file, and some inputs make
code spin; a Python ``try`` catches neither. So each Ray worker process (each worker
thread of the local executor) runs its chunks in a long-lived *sandbox* child process
and watches it. Sandboxes are forked from a zygote (:mod:`prep.runtime.zygote`: started
once with ``python -m``, no fork of a process that holds Lance state) that has imported the
job's modules, so restarting one after a crash or a hang, or probing an item, costs a fork,
not an interpreter importing torch again:

- The chunk worker walks its items through :meth:`Progress.items`, which marks the
  index of the item in hand in a shared 8-byte page (no message per item, so no
  cost on clean data) and ``-1`` between items.
  A worker marks itself idle (:meth:`Progress.idle`) while it hands rows to the
  writer, so the writer's time, stalls and crashes are never charged to an item.
- The parent waits for the result. If the child dies (any signal, an OOM kill, an
  exit) while item ``i`` is marked, or item ``i`` stays marked longer than
  ``item_timeout_s``, the child is killed if need be and the blame is *confirmed*:
  item ``i`` alone is run in a fresh child (a probe, whose output is discarded). Only
  if the probe dies or hangs on it too is the chunk run again with item ``i``
  *poisoned*: ``Progress.items`` hands it to the worker with the reason, and the
  worker records it as a reject where it records every other bad input. The output
  is therefore exactly a clean run's, minus those items, and rows in = rows written +
  rows rejected still holds.
- A death the probe does not confirm (the mark can name an innocent item: a signal
  sent to the whole process, a crash on another thread) and a death outside any item
  are *restarts*: the whole chunk runs again, nothing rejected, each logged and
  counted (``chunk_restarts`` in the job's counts). At most ``max_bad_items_per_chunk``
  items per chunk may be poisoned and ``max_task_retries`` restarts made; past either
  bound the chunk fails with one line.

A child's stderr reaches this process's only with ``-v`` (:func:`_relay_stderr`): native
decoders print a warning per odd image (libpng's ``tEXt: CRC error``, libtiff's unknown
tags), which a default or ``-q`` run does not show.

Test hooks (tests only; :data:`TEST_HOOKS`): ``PREP_TEST_FAULTS`` makes the sandbox
crash, hang or exit on named items, e.g. ``segv:ants/x.jpg;hang:bees/y.jpg;exit:BOOM``
(every name that contains the text after the colon; ``segv`` crashes the thread that
holds the item, as a native decoder does), and ``PREP_TEST_RAISE``
(:mod:`prep.prepare.faults`) makes a stage raise. The driver reads them and ships them
with the chunks, since sandboxes and Ray workers outlive a test's environment.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import mmap
import os
import pickle
import signal
import struct
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable, ContextManager, Iterable, Iterator, TypeVar

from prep.runtime import logs
from prep.runtime.config import JobConfig
from prep.errors import PrepError
from prep.prepare.faults import ENV as RAISE_ENV
from prep.runtime.executor import MAX_TASK_RETRIES
from prep.runtime.ray_cluster import WORKER_ENV
from prep.runtime import zygote
from prep.runtime.zygote import Zygote

__all__ = ["Limits", "Progress", "NO_PROGRESS", "FAULTS_ENV", "TEST_HOOKS", "dumps", "hooks_from_env", "run_isolated", "stop_sandboxes"]

log = logging.getLogger(__name__)

FAULTS_ENV = "PREP_TEST_FAULTS"
TEST_HOOKS = (FAULTS_ENV, RAISE_ENV)
_IDLE = -1
_MARK = struct.Struct("q")
T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """How long an item may take and how many failures a chunk may absorb (see :class:`JobConfig`)."""

    item_timeout_s: float = 60.0
    max_bad_items_per_chunk: int = 16
    max_task_retries: int = MAX_TASK_RETRIES

    @classmethod
    def of(cls, cfg: JobConfig) -> "Limits":
        return cls(cfg.item_timeout_s, cfg.max_bad_items_per_chunk, cfg.max_task_retries)


class Progress:
    """What a chunk worker walks its items through; this base class only passes them on.

    Workers call it outside a sandbox too (tests, benchmarks): then no item is poisoned.

    Attributes:
        probe: True when the run only checks whether one item crashes or hangs the
            process: the worker's output is discarded, so it must not be written.
    """

    probe = False

    def items(self, items: Iterable[T], name: Callable[[T], str] = str) -> Iterator[tuple[T, str | None]]:
        """Yields ``(item, poison)``: ``poison`` is None, or why the item must be rejected unprocessed.

        Args:
            items: the chunk's items, in their deterministic order.
            name: names an item for ``PREP_TEST_FAULTS`` (tests only).
        """
        for item in items:
            yield item, None

    def idle(self) -> ContextManager[None]:
        """Marks the worker idle inside the ``with``: wrap handing rows to the writer in it
        (a worker that yields batches yields them from inside an item)."""
        return contextlib.nullcontext()


NO_PROGRESS = Progress()


class _Tracked(Progress):
    """The sandbox side: marks the item in hand, hands poisoned items over with their reason.

    With ``only`` set (a probe) it hands over that item alone.
    """

    def __init__(self, page: mmap.mmap, poison: dict[int, str], only: int | None) -> None:
        self._page, self._poison, self._only = page, poison, only
        self.probe = only is not None
        faults = os.environ.get(FAULTS_ENV)
        self._faults = [tuple(f.split(":", 1)) for f in faults.split(";") if ":" in f] if faults else []

    def items(self, items: Iterable[T], name: Callable[[T], str] = str) -> Iterator[tuple[T, str | None]]:
        page, poison, only = self._page, self._poison, self._only
        for i, item in enumerate(items):  # the next item is read while the mark says idle
            if only is not None and i != only:
                continue
            reason = poison.get(i)
            _MARK.pack_into(page, 0, i)
            if self._faults and reason is None:
                _inject(self._faults, name(item))
            yield item, reason  # an exception escaping the worker here leaves the item marked: it is the culprit
            _MARK.pack_into(page, 0, _IDLE)
            if i == only:
                return
        _MARK.pack_into(page, 0, _IDLE)

    @contextlib.contextmanager
    def idle(self) -> Iterator[None]:
        held = _MARK.unpack_from(self._page, 0)[0]
        _MARK.pack_into(self._page, 0, _IDLE)
        try:
            yield
        finally:
            _MARK.pack_into(self._page, 0, held)


def _inject(faults: list[tuple[str, ...]], name: str) -> None:
    """Crashes, hangs or ends the process in the thread that holds the item, as a bad input would."""
    for action, needle in faults:
        if needle in name:
            if action == "segv":  # thread-directed: os.kill would let this thread run on to later items
                signal.pthread_kill(threading.get_ident(), signal.SIGSEGV)
            if action in ("segv", "hang"):
                while True:
                    time.sleep(3600)
            if action == "exit":
                os._exit(3)


def hooks_from_env() -> dict[str, str]:
    """The test hooks set in this process's environment, to ship with the chunks (see the module docstring)."""
    return {k: os.environ[k] for k in TEST_HOOKS if k in os.environ}


def dumps(obj: Any) -> bytes:
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


def _child_env() -> dict[str, str]:
    """The environment a sandbox child gets: this process's as it is now (credentials set since the last
    job included), one thread per sandbox (the task's CPU share) and Lance's log quiet, as Ray's workers
    get them; and exactly this process's imports: its sys.path, the current folder only where this
    process has it (``-P``: never a ``prep/`` that happens to be in the cwd)."""
    return {**os.environ, **WORKER_ENV, "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}


# Set anew for every test phase by pytest: a child restarted for it costs a torch import per test. The test
# hooks too: they travel with each request (_apply), so a zygote started without them serves a test that sets them.
_PER_TEST = ("PYTEST_CURRENT_TEST", *TEST_HOOKS)


def _lasting(env: dict[str, str]) -> dict[str, str]:
    """``env`` without what changes on its own between two jobs and no job reads."""
    return {k: v for k, v in env.items() if k not in _PER_TEST}


def _new_zygote(env: dict[str, str]) -> Zygote:
    """A zygote started with ``env``, its and its children's stderr relayed (:func:`_relay_stderr`)."""
    err_read, err_write = os.pipe()
    try:
        started = Zygote(env, stderr=err_write)
    finally:
        os.close(err_write)
    threading.Thread(target=_relay_stderr, args=(err_read,), name="sandbox-stderr", daemon=True).start()
    return started


class _Sandbox:
    """The parent side: a child forked from the process's zygote (:func:`prep.runtime.zygote.shared`, one for
    every thread), restarted (forked again: milliseconds) after it dies or is killed. A zygote is started
    again when the environment it would start with changed (its children keep the one it started with).
    In a forked process (a trainer's DataLoader worker) it is inert: its child is the parent's."""

    def __init__(self) -> None:
        self._zygote: Zygote | None = None
        self._owner = os.getpid()
        self._pid: int | None = None
        self._conn: Connection | None = None
        self._page: mmap.mmap | None = None

    def _start(self, env: dict[str, str], preload: tuple[str, ...]) -> None:
        self._zygote, self._owner = zygote.shared(tuple(sorted(_lasting(env).items())), lambda: _new_zygote(env)), os.getpid()
        parent, child = os.pipe(), os.pipe()  # requests parent->child, replies child->parent
        page_file = tempfile.TemporaryFile()
        page_file.write(b"\0" * _MARK.size)
        page_file.flush()
        try:
            self._pid = self._zygote.fork("prep.prepare.isolation:_child", (parent[0], child[1], page_file.fileno()), preload)
        except OSError as exc:
            for fd in (parent[1], child[0]):
                os.close(fd)
            page_file.close()
            raise PrepError(f"could not start a sandbox: {exc}") from None
        finally:
            os.close(parent[0])  # the child has its own copies
            os.close(child[1])
        self._send, self._conn = Connection(parent[1], readable=False), Connection(child[0], writable=False)
        self._page = mmap.mmap(page_file.fileno(), _MARK.size)
        page_file.close()

    def _stop(self) -> int | None:
        """Kills the child unless it ended; its exit code."""
        code = None
        if self._pid is not None and self._owner == os.getpid():  # in a forked copy, never wait on the parent's
            self._zygote.kill(self._pid)
            code = self._zygote.wait(self._pid)
            self._send.close()
            self._conn.close()
            self._page.close()
        self._pid = None
        return code

    def close(self) -> None:
        """Stops the child (the zygote is the process's: :func:`stop_sandboxes` closes it)."""
        self._stop()
        self._zygote = None

    def _attempt(self, request: bytes, timeout: float, preload: tuple[str, ...]) -> tuple[str, Any]:
        """Runs one request: ``("ok", value)``, ``("error", text)``, or ``("died", (item, reason))``."""
        env = _child_env()
        try:
            if (self._pid is None or self._owner != os.getpid() or self._zygote.poll(self._pid) is not None
                    or _lasting(env) != _lasting(self._zygote.env)):  # a kept child must see today's environment
                self._stop()
                self._start(env, preload)
            _MARK.pack_into(self._page, 0, _IDLE)
            try:
                self._send.send_bytes(request)
            except OSError:  # died while idle: start afresh
                self._stop()
                return "died", (_IDLE, "worker process died before the chunk started")
            return self._reply(timeout)
        except BaseException:  # interrupted (ray.cancel, Ctrl-C), also as a blocking write of the request returned: the
            self._stop()  # child may still answer this request later, and the next one would read that answer as its own
            raise

    def _reply(self, timeout: float) -> tuple[str, Any]:
        """Waits for the child's answer to the request just sent (see :meth:`_attempt`)."""
        seen, since = _IDLE, time.monotonic()
        while True:
            if self._conn.poll(min(0.25, timeout / 4)):
                try:
                    return pickle.loads(self._conn.recv_bytes())
                except EOFError:  # the child is gone: its end of the pipe closed
                    break
            item = _MARK.unpack_from(self._page, 0)[0]
            now = time.monotonic()
            if item != seen:
                seen, since = item, now
            elif item != _IDLE and now - since > timeout:
                self._stop()
                return "died", (item, f"timed out after {timeout:g} s (item_timeout_s)")
            if self._zygote.poll(self._pid) is not None and not self._conn.poll():
                break
        item = _MARK.unpack_from(self._page, 0)[0]
        return "died", (item, _describe_death(self._stop()))

    def run(self, fn: Callable[..., Any], kwargs: dict[str, Any], limits: Limits, hooks: dict[str, str],
            preload: tuple[str, ...]) -> tuple[Any, int]:
        """``fn(progress, **kwargs)`` in the child, poisoning items that crash or hang it.

        Returns:
            What ``fn`` returned, and how many times the chunk was restarted (deaths
            not pinned on an item).

        Raises:
            PrepError: too many bad items, too many restarts, or ``fn`` raised.
        """
        poison: dict[int, str] = {}
        restarts = 0
        while True:
            kind, value = self._attempt(dumps((fn, kwargs, poison, hooks, None)), limits.item_timeout_s, preload)
            if kind == "ok":
                return value, restarts
            if kind == "error":
                raise PrepError(value)
            item, reason = value
            if item != _IDLE and self._confirmed(fn, kwargs, item, limits, hooks, preload):
                poison[item] = reason
                if len(poison) > limits.max_bad_items_per_chunk:
                    raise PrepError(f"{len(poison)} items crashed or timed out in one chunk (max_bad_items_per_chunk={limits.max_bad_items_per_chunk}); last: {reason}")
                continue
            restarts += 1
            where = "outside any single item" if item == _IDLE else f"while item {item} was in hand, but not when that item ran alone"
            if restarts > limits.max_task_retries:
                shown = "" if logs.verbose() else "; rerun with -v to see what the worker process printed"
                raise PrepError(f"{reason} {where}, {restarts} times (max_task_retries={limits.max_task_retries}){shown}")
            log.warning("%s %s; the whole chunk runs again (restart %d of max_task_retries=%d)", reason, where, restarts, limits.max_task_retries)

    def _confirmed(self, fn: Callable[..., Any], kwargs: dict[str, Any], item: int, limits: Limits, hooks: dict[str, str],
                   preload: tuple[str, ...]) -> bool:
        """Whether ``item`` alone, in a fresh child, crashes or hangs it too: the mark can name an
        innocent item (a signal sent to the whole process, a crash on another thread)."""
        kind, value = self._attempt(dumps((fn, kwargs, {}, hooks, item)), limits.item_timeout_s, preload)
        return kind == "died" and value[0] == item


def _relay_stderr(fd: int) -> None:
    """Passes a sandbox child's stderr on to this process's only with ``-v``: what reaches it is the native
    decoders' chatter (libpng, libtiff warnings, a line per odd image) and Ray-style worker output, which
    ``-v`` shows and a default or ``-q`` run does not; prep's own word on an item is its reject reason."""
    with open(fd, "rb", buffering=0) as pipe:
        for line in iter(pipe.readline, b""):
            if logs.verbose():
                os.write(2, line)


_SANDBOXES = threading.local()  # one per thread: a Ray worker's task thread, each local worker thread
_STARTED: list[_Sandbox] = []
os.register_at_fork(after_in_child=_STARTED.clear)  # the parent's sandboxes are not a forked child's to stop


class _StopsAtThreadEnd:
    """Held in the thread's local storage: when the thread ends (a local pool replaced), its sandbox's child
    is stopped, as it was when each thread had a zygote of its own (the process's zygote outlives threads)."""

    def __init__(self, sandbox: _Sandbox) -> None:
        self.sandbox = sandbox

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit stop_sandboxes did it already
            self.sandbox.close()


@atexit.register
def stop_sandboxes() -> None:
    """Stops (and waits for) every sandbox this process started and its zygote, so their CPU time is its own."""
    for sandbox in _STARTED:
        sandbox.close()
    zygote.close_shared()


def run_isolated(fn: Callable[..., Any], kwargs: dict[str, Any], limits: Limits,
                 hooks: dict[str, str] | None = None, preload: tuple[str, ...] = ()) -> tuple[Any, int]:
    """Runs ``fn(progress, **kwargs)`` in this thread's sandbox child (see the module docstring).

    The process's zygote is started on the first call and kept: a Ray worker, or the local executor's
    pool of worker threads together, pays for its imports (torch, Lance) once, and a child
    restarted after a crash or a hang, or a probe, starts in milliseconds.

    Args:
        fn: a module-level function taking a :class:`Progress` first.
        kwargs: its other arguments (picklable).
        limits: the job's limits.
        hooks: the test hooks the driver saw (:func:`hooks_from_env`; tests only).
        preload: modules the zygote imports before it forks the child (``fn``'s heavy imports),
            so that restarted children and probes have them; never a module that runs Lance.

    Returns:
        What ``fn`` returned, and how many times the chunk was restarted after a death
        that no item was confirmed to cause.

    Raises:
        PrepError: the chunk cannot finish within the limits; one line saying why.
    """
    sandbox = getattr(_SANDBOXES, "sandbox", None)
    if sandbox is None:
        sandbox = _SANDBOXES.sandbox = _Sandbox()
        _SANDBOXES.stops = _StopsAtThreadEnd(sandbox)
        _STARTED.append(sandbox)
    return sandbox.run(fn, kwargs, limits, hooks or {}, preload)


def _apply(hooks: dict[str, str]) -> None:
    """Sets this sandbox's test hooks to the driver's (a sandbox serves many jobs)."""
    for key in TEST_HOOKS:
        if key in hooks:
            os.environ[key] = hooks[key]
        else:
            os.environ.pop(key, None)


def _child(request_fd: int, reply_fd: int, page_fd: int) -> None:
    """The sandbox's loop (forked by the zygote, dies with it): serve requests until the parent goes away."""
    requests, replies = Connection(request_fd, writable=False), Connection(reply_fd, readable=False)
    page = mmap.mmap(page_fd, _MARK.size)
    while True:
        try:
            request = requests.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            fn, kwargs, poison, hooks, only = pickle.loads(request)
            _apply(hooks)
            reply = ("ok", fn(_Tracked(page, poison, only), **kwargs))
        except Exception as exc:  # fn reports its own errors; this is a failure of the sandbox itself
            reply = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        _MARK.pack_into(page, 0, _IDLE)
        replies.send_bytes(pickle.dumps(reply))
