"""Run one command as a user would and measure it: wall, CPU and peak memory of its whole process tree.

    from measure import run
    m = run(["prep", "verify", "out/epochs"])
    m.wall_s, m.cpu_s, m.peak_tree_rss, m.peak_process_rss, m.returncode, m.stdout

- **wall**: process start to exit, as a user waits for it.
- **CPU**: user + system seconds of the process and every descendant. ``RUSAGE_CHILDREN``
  counts a process once its parent has waited for it, and so on up the chain; a
  descendant whose parent never waits for it (a forkserver worker, a sandbox that
  outlives its driver) would be lost. So this process makes itself a *child subreaper*
  (Linux ``PR_SET_CHILD_SUBREAPER``, once, on the first call): such orphans are handed
  to it, and it waits for them after the command exits, which puts their CPU into
  ``RUSAGE_CHILDREN`` too, each process exactly once (psutil samples of live descendants,
  as the other benchmarks take, would count a descendant twice once its parent waits for
  it, and miss what it ran after the last sample). Linux only.
- **peak tree RSS**: a thread samples every ``interval`` s (default 0.1) the RSS of the
  command and all its descendants (orphans handed to this process included) and keeps
  the largest sum. A sum of RSS counts pages shared between processes (imports a
  sandbox inherited, the page cache of mapped files is not RSS) once per process: an
  upper bound of what the tree holds at a sample. Peaks shorter than the interval can be
  missed; the largest process's own high-water mark (below) is a floor for it.
- **peak process RSS**: the largest single process, from the samples and from the
  kernel's own high-water mark of every process this one waited for (``ru_maxrss``).

The caller must not start other children while a command is measured: every child of
this process (the orphans handed to it) is counted as the command's, except the subtree of
``apart`` (a Ray head the command joins, started by the caller: its workers are the head's
children, measured by the caller on the head's side).
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import psutil

__all__ = ["Measured", "run"]

_PR_SET_CHILD_SUBREAPER = 36
_subreaper = False  # set on the first call


@dataclass(frozen=True)
class Measured:
    """One command's measurement (module docstring: what each field covers)."""

    wall_s: float
    cpu_s: float
    peak_tree_rss: int  # bytes
    peak_process_rss: int  # bytes
    returncode: int
    stdout: str
    stderr: str
    lingering: list[int] = field(default_factory=list)  # descendants still alive after ``linger_s`` (not waited for)


def _become_subreaper() -> None:
    """Has orphaned descendants handed to this process (Linux), once.

    Raises:
        OSError: not Linux, or ``prctl`` refused.
    """
    global _subreaper
    if _subreaper:
        return
    if not sys.platform.startswith("linux"):
        raise OSError(f"benchmarks/measure.py needs Linux (PR_SET_CHILD_SUBREAPER), not {sys.platform}")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    _subreaper = True


class _Sampler(threading.Thread):
    """Samples the RSS of every descendant of this process that was not there before the command, until stopped."""

    def __init__(self, before: set[int], interval: float, apart: int | None) -> None:
        super().__init__(daemon=True, name="measure-rss")
        self.before, self.interval, self.apart = before, interval, apart
        self.peak_tree = self.peak_process = 0
        self._stop_event = threading.Event()

    def sample(self) -> None:
        total = 0
        skip = self.before | _subtree(self.apart)
        for p in psutil.Process().children(recursive=True):
            if p.pid in skip:
                continue
            try:
                rss = p.memory_info().rss
            except psutil.Error:  # gone since it was listed
                continue
            total += rss
            self.peak_process = max(self.peak_process, rss)
        self.peak_tree = max(self.peak_tree, total)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _subtree(pid: int | None) -> set[int]:
    """``pid`` and its descendants now (empty for None or a process gone)."""
    if pid is None:
        return set()
    try:
        return {pid, *(p.pid for p in psutil.Process(pid).children(recursive=True))}
    except psutil.Error:
        return set()


def run(cmd: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None,
        interval: float = 0.1, linger_s: float = 30.0, apart: int | None = None) -> Measured:
    """Runs ``cmd`` to its exit and measures it (module docstring); stdout and stderr are captured.

    Args:
        cmd: the command line.
        env, cwd: as for :func:`subprocess.Popen` (default: this process's).
        interval: seconds between RSS samples.
        linger_s: how long to wait, after the command exits, for descendants it left
            running (handed to this process); those still alive are listed in ``lingering``.
        apart: a child of this process whose descendants are never the command's (module docstring).

    Returns:
        The measurement; a non-zero ``returncode`` is the caller's to judge.
    """
    _become_subreaper()
    before_children = {p.pid for p in psutil.Process().children(recursive=True)}
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), env=dict(env) if env is not None else None, cwd=cwd, stdout=out, stderr=err)
        sampler = _Sampler(before_children, interval, apart)
        sampler.start()
        _, status, ru_main = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        peak_waited = ru_main.ru_maxrss * 1024  # KiB on Linux
        lingering = _reap_orphans(before_children, linger_s, apart)
        sampler.stop()
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak_waited = max(peak_waited, ru1.ru_maxrss * 1024 if ru1.ru_maxrss > ru0.ru_maxrss else 0)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    peak_process = max(sampler.peak_process, peak_waited)
    return Measured(wall_s=wall, cpu_s=cpu, peak_tree_rss=max(sampler.peak_tree, peak_process),
                    peak_process_rss=peak_process, returncode=proc.returncode,
                    stdout=stdout, stderr=stderr, lingering=lingering)


def _reap_orphans(before: set[int], linger_s: float, apart: int | None = None) -> list[int]:
    """Waits for the descendants handed to this process (children it did not have before, outside ``apart``'s
    subtree), up to ``linger_s``; returns the pids still alive then."""
    deadline = time.monotonic() + linger_s
    while True:
        before = before | _subtree(apart)
        mine = [p.pid for p in psutil.Process().children() if p.pid not in before]
        for pid in mine:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped meanwhile
                pass
        alive = [p.pid for p in psutil.Process().children(recursive=True) if p.pid not in before]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)
