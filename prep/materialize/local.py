"""The local executor: the (epoch, split) tasks on a thread pool in this process, without Ray.

Chosen when there is no cluster (:func:`prep.runtime.ray_cluster.use_ray`): on one
machine a fresh Ray costs seconds of start-up and an object store, and buys
nothing, since Lance and Arrow release the GIL while they read, take, hash
and write. The output is identical to the Ray executor's (same splits, same
checksums, same manifest): only where the rows come from differs.

- The selected rows, read in one sequential pass, are held in memory
  (:mod:`prep.materialize.held`) when they fit in ``HOLD_BYTES``; each split
  task takes its rows from there. Full random costs about one scan plus an
  in-memory take.
- When they do not fit: small clumps (where a Lance ``take`` per row costs ~5x
  a scan) are written in groups of splits, one sequential pass per group
  keeping only that group's rows; large clumps and ``sequential`` take their
  rows from the table in each split task (memory: a few read batches a task).
"""

from __future__ import annotations

import os
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, Callable

import numpy as np

from prep.materialize.held import hold_splits, reads_scattered
from prep.materialize.job import Job, _run_task
from prep.materialize.rows import bytes_per_row
from prep.materialize.write import _write_split

__all__ = ["HOLD_BYTES", "run_local", "run_all"]

HOLD_BYTES = 2 << 30  # Arrow bytes of selected rows held in memory at once (see module docstring)
_READ_BYTES = 64 << 20  # rows per sequential read while holding: about this many bytes


def _groups(num_splits: int, total_bytes: int) -> list[range]:
    """Contiguous groups of splits, each holding about ``HOLD_BYTES`` of rows at most (one split per group at least).

    >>> _groups(8, 3 * HOLD_BYTES)
    [range(0, 3), range(3, 6), range(6, 8)]
    """
    count = min(num_splits, max(1, -(-total_bytes // HOLD_BYTES)))
    per = -(-num_splits // count)
    return [range(a, min(a + per, num_splits)) for a in range(0, num_splits, per)]


def run_all(pool: ThreadPoolExecutor, calls: list[tuple[str, Any, tuple]], on_done: Callable[[], None] = lambda: None) -> list[dict]:
    """Runs ``(where, fn, args)`` calls on ``pool`` (``on_done`` after each); the first error is raised as soon as it happens."""
    futures = [pool.submit(_run_task, fn, where, *args) for where, fn, args in calls]
    for future in futures:
        future.add_done_callback(lambda _: on_done())
    finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
    failed = [f for f in futures if f in finished and f.exception() is not None]
    if failed:
        raise failed[0].exception()
    return [f.result() for f in futures]


def run_local(job: Job, source: Any, todo: list[tuple[int, int]], hash_keys: np.ndarray | None, *,
              num_cpus: int | None, on_done: Callable[[], None] = lambda: None) -> list[dict]:
    """Writes the (epoch, split) pairs in ``todo`` on threads of this process; returns their done records.

    Args:
        job (Job): the run.
        source (lance.LanceDataset): the open source table.
        todo (list[tuple[int, int]]): (epoch, split) pairs to write.
        hash_keys (np.ndarray | None): one key per selected row (``hash`` strategy), else None.
        num_cpus (int | None): threads (default: the CPUs of this machine).
        on_done (Callable[[], None]): called as each split is written (the progress bar).

    Raises:
        PrepError: the first task that failed, with where it happened.
    """
    row_bytes = bytes_per_row(job, source)
    total = row_bytes * job.num_selected
    records: list[dict] = []
    pool = ThreadPoolExecutor(num_cpus or os.cpu_count() or 1, thread_name_prefix="prep-materialize")
    try:
        if total > HOLD_BYTES and not reads_scattered(job.plan):
            return run_all(pool, [(f"epoch {e} split {s}", _write_split, (job, e, s, hash_keys)) for e, s in todo], on_done)
        chunk_rows = max(job.read_rows, _READ_BYTES // row_bytes)
        for group in _groups(job.plan.num_splits, total):
            mine = [(e, s) for e, s in todo if s in group]
            if not mine:
                continue
            where = f"reading the rows of splits {group.start}..{group.stop - 1}"
            held = _run_task(hold_splits, where, job, group, hash_keys, chunk_rows)
            records += run_all(pool, [(f"epoch {e} split {s}", _write_split, (job, e, s, hash_keys, held)) for e, s in mine],
                                on_done)
            del held
        return records
    finally:  # an error or Ctrl-C: tasks not started are dropped, the running ones finish their split
        pool.shutdown(wait=True, cancel_futures=True)
