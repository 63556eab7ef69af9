"""What prep's forkserver imports (:func:`prep.reader.loader.worker_context` preloads this module alone).

The modules every DataLoader worker needs load once, in the forkserver, so workers start in
~0.1 s. Lance warns before every ``fork`` of a process that imported it ("lance is not
fork-safe ... use spawn or forkserver instead"); what breaks is forking a process whose Lance
runtime has started (:mod:`prep.reader.forksafe`). The forkserver imports Lance but never calls
it, so its forks are the safe kind the warning itself recommends, and the warning is silenced
there. Only there: each forked worker drops the filter, so a worker that forks after reading
still hears it.
"""

from __future__ import annotations

import contextlib
import os
import warnings

import torch  # noqa: F401
import prep.reader  # noqa: F401

__all__: list[str] = []

warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)
_FILTER = warnings.filters[0]


def _drop_filter() -> None:
    with contextlib.suppress(ValueError):
        warnings.filters.remove(_FILTER)


os.register_at_fork(after_in_child=_drop_filter)
