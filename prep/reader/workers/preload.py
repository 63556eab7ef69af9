"""What prep's forkserver imports (:func:`prep.reader.loader.worker_context` preloads this module alone).

The modules every DataLoader worker needs load once, in the forkserver, so workers start in
~0.1 s. Lance warns before every ``fork`` of a process that imported it ("lance is not
fork-safe ... use spawn or forkserver instead"); what breaks is forking a process whose Lance
runtime has started (:mod:`prep.reader.workers.forksafe`). The forkserver imports Lance but never calls
it, so its forks are the safe kind the warning itself recommends, and the warning is silenced
there. Only there: each forked worker drops the filter, so a worker that forks after reading
still hears it.

Each forked worker also starts its lifeline (:mod:`prep.reader.workers.lifeline`) at once: a trainer
killed while its workers start (before torch's worker loop runs any prep code) left a worker
waiting for indices forever, and with it the forkserver, the resource tracker and the run's
semaphores in /dev/shm. Even a trainer killed before the forkserver finished its imports can
leave one: its request to fork, queued on the forkserver's socket, holds the forkserver's
"alive" pipe open, so the forkserver forks that worker after all.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import cast

import torch  # noqa: F401
import prep.reader  # noqa: F401
from prep.reader.workers import lifeline

__all__: list[str] = []

warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)
_FILTER = warnings.filters[0]


def _in_worker() -> None:
    with contextlib.suppress(ValueError):
        cast("list[object]", warnings.filters).remove(_FILTER)  # typeshed says Sequence; it is warnings' own list
    lifeline.watch(forked=True)


os.register_at_fork(after_in_child=_in_worker)
