"""Kill points: every commit point of a materialize run, where a test can kill the process.

A run commits in a fixed order: the job marker, the filter sidecar, each spilled
segment (runs beyond their memory budget), each split dataset, its done record, the manifest. Each step calls :func:`kill_point` with
its name just after it commits. ``PREP_TEST_KILL=<point>[:<n>]`` (tests only) makes
the ``n``-th arrival at ``<point>`` (default the first) end the process at once with
``os._exit``, as SIGKILL would: no cleanup, no atexit, no flush. The tests then
check that the plain rerun completes and writes what an uninterrupted run writes.
Unset, a kill point costs one dictionary lookup.

>>> sorted(POINTS)
['done', 'manifest', 'marker', 'selection', 'spill', 'split']
"""

from __future__ import annotations

import os
import threading

__all__ = ["KILL_ENV", "POINTS", "kill_point"]

KILL_ENV = "PREP_TEST_KILL"
KILLED_EXIT = 137  # what a shell reports for SIGKILL
POINTS = frozenset({"marker", "selection", "spill", "split", "done", "manifest"})
_arrivals: dict[str, int] = {}
_lock = threading.Lock()


def kill_point(point: str) -> None:
    """Ends the process here when ``PREP_TEST_KILL`` names ``point`` and this is its ``n``-th arrival."""
    wanted = os.environ.get(KILL_ENV)
    if not wanted:
        return
    name, _, nth = wanted.partition(":")
    if name not in POINTS:
        raise ValueError(f"{KILL_ENV}={wanted!r}: the point must be one of {sorted(POINTS)}")
    if name != point:
        return
    with _lock:
        _arrivals[point] = _arrivals.get(point, 0) + 1
        if _arrivals[point] == int(nth or 1):
            os._exit(KILLED_EXIT)
