"""A chunk worker that kills its own process once, in a module light enough for a sandbox to import fast.

It stands for a death its item does not cause: a signal sent to the whole process
(``kill -ABRT``, ``SIGXCPU`` from a CPU limit) that lands while some item is in hand.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psutil
import pyarrow as pa

from prep.prepare.chunk_runner import ChunkOutput
from prep.prepare.rejects import Reject


@dataclass(frozen=True)
class DiesOnce:
    """Kills its own process the first time it reaches ``at`` (an item, or None: after the
    last item); ``marker`` is the file that remembers it did."""

    at: str | None
    marker: str
    feeder: bool = False  # kill the process that feeds the sandbox (a Ray worker: its zygote's parent) instead of the sandbox

    def __call__(self, chunk, progress):
        rows, rejects = [], []
        for item, poison in progress.items(chunk):
            if poison is not None:
                rejects.append(Reject("mem://items", f"item {item}", poison))
                continue
            if item == self.at:
                self._die_once()
            rows.append(item)
        if self.at is None:
            self._die_once()
        counts = Counter(rows_read=len(chunk), rows_accepted=len(rows), rows_written=len(rows), rows_rejected=len(rejects))
        return ChunkOutput(pa.table({"item": pa.array(rows, pa.string())}), rejects, counts)

    def _die_once(self) -> None:
        if not os.path.exists(self.marker):
            Path(self.marker).touch()
            os.kill(psutil.Process(os.getppid()).ppid() if self.feeder else os.getpid(), signal.SIGKILL)


def env_of(progress, name: str) -> str | None:
    """What the sandbox running it sees for the environment variable ``name``."""
    return os.environ.get(name)


def sleep_then(progress, seconds: float, value: str) -> str:
    """Sleeps ``seconds`` in the sandbox, then returns ``value``."""
    import time

    time.sleep(seconds)
    return value


def parent_pid(progress) -> int:
    """The pid of the process that started the sandbox running it (its zygote)."""
    return os.getppid()


def segfault(progress) -> None:
    """Crashes the sandbox on its only item, as a native decoder does."""
    for _ in progress.items(["the item"]):
        os.kill(os.getpid(), signal.SIGSEGV)


def report_pid_then_sleep(fd: int) -> None:
    """A zygote child's target: writes its pid to ``fd``, then lives until it is killed (60 s at most)."""
    import time

    os.write(fd, str(os.getpid()).encode())
    time.sleep(60)
