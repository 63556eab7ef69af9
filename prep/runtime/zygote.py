"""A zygote: a process that imports a worker's modules once and forks children that start warm.

A sandbox (:mod:`prep.prepare.isolation`) started with ``python -m`` pays for its imports
(torch, torchvision, transformers: ~4-6 CPU-s) each time it starts, and it starts again after
every crash, every hang and for every probe. Forked from a zygote that holds those imports, a
child starts in milliseconds. Forking is safe only from a process whose Lance runtime never
ran (:mod:`prep.reader.workers.forksafe`), so the zygote imports modules and never calls into them:
it only serves ``fork``, ``kill`` and reports its children's exits; it refuses to fork once a
Lance thread is running in it. Children run one function on the file descriptors they were
handed and exit; each dies with the zygote, and the zygote with the thread that started it
(``PR_SET_PDEATHSIG``).

A process needs one zygote, not one per thread: :func:`shared` hands every thread (each worker
thread of the local executor) the same one, started on a thread that lives as long as the
process, so N sandboxes pay for the imports once, not N times (a local job on 2 workers
imported torch twice; on 16, 16 times). The parent side, :class:`Zygote`, is thread-safe.
"""

from __future__ import annotations

import importlib
import itertools
import os
import pickle
import select
import signal
import queue
import socket
import subprocess
import sys
import threading
import traceback
from typing import Callable, Hashable, Mapping, Sequence

__all__ = ["Zygote", "close_shared", "lance_running", "shared"]

_MAX_MESSAGE = 1 << 16


def _die_with_parent() -> None:
    """SIGKILL this process when its parent (the thread that started it) ends; exits if that already happened."""
    if sys.platform.startswith("linux"):
        import ctypes

        parent = os.getppid()
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)


def lance_running() -> bool:
    """Whether Lance's runtime threads run in this process (then a fork of it is not safe)."""
    if "lance" not in sys.modules:
        return False
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # no procfs: assume the worst once Lance is imported
        return True
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().startswith("lance"):
                    return True
        except OSError:
            continue
    return False


class Zygote:
    """The parent side: starts the zygote, asks it for children, learns how they ended (from any thread)."""

    def __init__(self, env: Mapping[str, str], stderr: int | None = None) -> None:
        """Starts the zygote with ``env`` (its children inherit it, and ``stderr``: a file descriptor, default
        this process's) and this process's interpreter and sys.path."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.env = dict(env)
        self._proc = subprocess.Popen([sys.executable, "-P", "-m", "prep.runtime.zygote", str(theirs.fileno())],
                                      pass_fds=(theirs.fileno(),), env=self.env, close_fds=True, stderr=stderr)
        theirs.close()
        self._sock = mine
        self._exits: dict[int, int] = {}
        self._live: set[int] = set()
        self._lock = threading.RLock()  # one request or receive at a time: each thread's answer arrives in order
        self._requests = itertools.count()  # each fork request's number, which its answer repeats
        self._orphans: set[int] = set()  # children of interrupted forks, killed: reaped here, waited for by nobody

    def alive(self) -> bool:
        """Whether the zygote process still runs."""
        return self._proc.poll() is None

    def fork(self, target: str, fds: Sequence[int], preload: Sequence[str] = ()) -> int:
        """A child running ``target`` (``"module:function"``) on its copies of ``fds``; its pid.

        ``preload`` modules are imported in the zygote first (once: later children have them).

        Raises:
            OSError: the zygote is gone, or could not fork (the text says why).
        """
        with self._lock:
            number = next(self._requests)
            try:
                socket.send_fds(self._sock, [pickle.dumps(("fork", number, tuple(preload), target))], list(fds))
            except OSError as exc:
                raise OSError(f"the sandbox zygote is gone ({exc})") from None
            while True:
                kind, *rest = self._receive()
                if kind == "forked" and rest[0] != number:  # asked for by a call interrupted after its request went out
                    self._live.add(rest[1])  # (a Ray cancel, Ctrl-C): nobody holds its pid, so nobody would stop it
                    self._orphans.add(rest[1])
                    self.kill(rest[1])
                elif kind == "forked":
                    self._live.add(rest[1])
                    return rest[1]
                elif kind == "error" and rest[0] == number:
                    raise OSError(rest[1])
                elif kind == "gone":
                    raise OSError("the sandbox zygote died")

    def kill(self, pid: int) -> None:
        """SIGKILLs the child ``pid`` unless it already ended (the zygote knows: no pid reuse race)."""
        with self._lock:
            if pid in self._live:
                try:
                    self._sock.send(pickle.dumps(("kill", pid)))
                except OSError:  # the zygote is gone, and its children with it
                    pass

    def poll(self, pid: int) -> int | None:
        """``pid``'s exit code as :class:`subprocess.Popen` gives it (``-signal`` when killed), or None while it runs."""
        with self._lock:
            while pid not in self._exits and self._ready():
                self._receive()
            return self._exits.get(pid)

    def wait(self, pid: int) -> int:
        """Waits for ``pid`` to end; its exit code (see :meth:`poll`)."""
        with self._lock:
            while pid not in self._exits:
                self._receive()
            self._live.discard(pid)
            return self._exits.pop(pid)

    def busy(self) -> bool:
        """Whether a child forked from it has not been waited for yet."""
        with self._lock:
            return bool(self._live)

    def close(self) -> None:
        """Ends the zygote and, with it, its children; waits for it."""
        self._sock.close()  # the zygote kills its children and exits when its socket closes
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _ready(self) -> bool:  # called with the lock held
        """Whether a message (or the zygote's end) waits to be received (poll, not select: any fd number)."""
        poller = select.poll()
        poller.register(self._sock, select.POLLIN)
        return bool(poller.poll(0))

    def _receive(self) -> tuple:  # called with the lock held
        """The next message (waits for it); a child's exit is recorded. A zygote that died reports its children killed."""
        try:
            data = self._sock.recv(_MAX_MESSAGE)
        except OSError:
            data = b""
        if not data:
            for pid in self._live:
                self._exits.setdefault(pid, -signal.SIGKILL)
            return ("gone",)
        message = pickle.loads(data)
        if message[0] == "exit" and message[1] in self._orphans:
            self._orphans.discard(message[1])
            self._live.discard(message[1])
        elif message[0] == "exit":
            self._exits[message[1]] = message[2]
        return message


# ---------------------------------------------------------------- one per process

_current: tuple[Hashable, Zygote] | None = None  # the zygote new children come from, and its key
_retired: list[Zygote] = []  # replaced ones, closed once none of their children is left
_shared_lock = threading.Lock()
_keeper_calls: "queue.Queue[tuple[Callable[[], Zygote], queue.Queue]]" = queue.Queue()
_keeper: threading.Thread | None = None


def shared(key: Hashable, start: Callable[[], Zygote]) -> Zygote:
    """This process's zygote for ``key`` (what its children must see, e.g. the environment), for every thread.

    ``start`` makes one when there is none for ``key`` or it died; it runs on a thread kept for the purpose
    (a zygote dies with the thread that started it: a local worker thread ends when the pool is replaced,
    and the other threads' children would die with it). A new key replaces the zygote; the one replaced
    is closed once every child forked from it was waited for.
    """
    global _current
    with _shared_lock:
        if _current is not None and (_current[0] != key or not _current[1].alive()):
            _retired.append(_current[1])
            _current = None
        for old in [z for z in _retired if not z.busy()]:
            _retired.remove(old)
            old.close()
        if _current is None:
            _current = key, _on_keeper(start)
        return _current[1]


def close_shared() -> None:
    """Closes this process's zygotes (and so their children); the next :func:`shared` starts a fresh one."""
    global _current
    with _shared_lock:
        zygotes = [*_retired, *([_current[1]] if _current else [])]
        _retired.clear()
        _current = None
    for zygote in zygotes:
        zygote.close()


def _on_keeper(start: Callable[[], Zygote]) -> Zygote:
    """``start()`` run on the keeper thread, which lives as long as this process."""
    global _keeper
    if _keeper is None or not _keeper.is_alive():
        _keeper = threading.Thread(target=_keep, name="prep-zygote-keeper", daemon=True)
        _keeper.start()
    answer: queue.Queue = queue.Queue(1)
    _keeper_calls.put((start, answer))
    ok, value = answer.get()
    if not ok:
        raise value
    return value


def _keep() -> None:
    while True:
        start, answer = _keeper_calls.get()
        try:
            answer.put((True, start()))
        except BaseException as exc:
            answer.put((False, exc))


def _forget_after_fork() -> None:
    """A forked child has none of its parent's threads, and its parent's zygotes are not its own."""
    global _current, _keeper, _shared_lock, _keeper_calls
    _current, _keeper, _shared_lock, _keeper_calls = None, None, threading.Lock(), queue.Queue()
    _retired.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


# ---------------------------------------------------------------- the zygote itself


def _serve(sock_fd: int) -> None:
    """Serves fork and kill requests until the parent closes its socket; then kills and reaps its children."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the parent's to handle; children get Python's default back
    sock = socket.socket(fileno=sock_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    live: set[int] = set()
    try:
        while True:
            ready = select.select([sock, wake_r], [], [])[0]
            if wake_r in ready:
                os.read(wake_r, 4096)
            for pid in list(live):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    live.discard(pid)
                    sock.send(pickle.dumps(("exit", pid, os.waitstatus_to_exitcode(status))))
            if sock not in ready:
                continue
            data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 16)
            if not data:
                return
            request = pickle.loads(data)
            if request[0] == "kill":
                if request[1] in live:
                    os.kill(request[1], signal.SIGKILL)
                continue
            _, number, preload, target = request
            try:
                pid = _fork(preload, target, fds, (sock, wake_r, wake_w))
            except Exception as exc:
                sock.send(pickle.dumps(("error", number, f"the sandbox zygote could not start a child: {type(exc).__name__}: {exc}")))
            else:
                live.add(pid)
                sock.send(pickle.dumps(("forked", number, pid)))
            finally:
                for fd in fds:
                    os.close(fd)
    finally:
        for pid in live:
            os.kill(pid, signal.SIGKILL)
        for pid in live:
            os.waitpid(pid, 0)


def _fork(preload: Sequence[str], target: str, fds: Sequence[int], own: tuple) -> int:
    """Imports ``preload``, forks; the child runs ``target(*fds)`` and exits with its outcome."""
    for name in preload:
        importlib.import_module(name)
    module, _, function = target.partition(":")
    fn = getattr(importlib.import_module(module), function)
    if lance_running():  # the zygote must never run Lance: a forked child of a running runtime can crash
        raise RuntimeError("Lance threads run in the zygote; a forked child could crash (a preloaded module ran Lance)")
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        own[0].close()
        os.close(own[1])
        os.close(own[2])
        _die_with_parent()
        fn(*fds)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
