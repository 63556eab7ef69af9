"""The Ray executor: one Ray task per (epoch, split), for runs on a cluster.

Chosen when there is a cluster to use (:func:`prep.runtime.ray_cluster.use_ray`).
Small clumps go through the gather pass (:mod:`prep.materialize.gather`),
everything else through Lance takes in the split tasks. A task's error
cancels the others and is re-raised in the driver as one line naming the
(epoch, split) or the gather chunk where it happened.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pyarrow as pa
import ray

from prep.errors import PrepError, one_line
from prep.materialize.gather import _gather_pieces, _write_gathered
from prep.materialize.held import reads_scattered
from prep.materialize.job import Job, _run_task
from prep.materialize.write import _write_split
from prep.runtime.ray_cluster import init_ray

__all__ = ["run_on_ray", "released", "collect"]


def released(fn: Callable[..., Any], where: str, *args: Any) -> Any:
    """A task that hands its Arrow memory back to the OS when done: a worker runs many tasks, each holding a split."""
    try:
        return _run_task(fn, where, *args)
    finally:
        pa.default_memory_pool().release_unused()


def _counted(record: dict, on_done: Callable[[], None]) -> dict:
    on_done()
    return record


def run_on_ray(job: Job, source: Any, todo: list[tuple[int, int]], hash_keys: np.ndarray | None, *,
               address: str | None, num_cpus: int | None, on_done: Callable[[], None] = lambda: None,
               resources: dict[str, float] | None = None) -> list[dict]:
    """Writes the (epoch, split) pairs in ``todo`` on Ray; returns their done records.

    Args:
        job (Job): the run.
        source (lance.LanceDataset): the open source table (the driver's handle, for sizing the gather pass).
        todo (list[tuple[int, int]]): (epoch, split) pairs to write.
        hash_keys (np.ndarray | None): one key per selected row (``hash`` strategy), else None.
        address (str | None): cluster to join (default ``RAY_ADDRESS``, else a local Ray).
        num_cpus (int | None): CPUs of a local Ray (default: all).
        on_done (Callable[[], None]): called as each split's record arrives, in order (the progress bar).
        resources (dict | None): custom Ray resources each task asks for (pins tasks to nodes).

    Raises:
        PrepError: the first task that failed, with where it happened.
    """
    init_ray(address, num_cpus=num_cpus)
    remote = ray.remote(num_cpus=1, max_retries=2, resources=resources or None)(released)
    hash_ref = ray.put(hash_keys) if hash_keys is not None else None
    if reads_scattered(job.plan):
        pieces = _gather_pieces(job, source, remote, hash_ref)
        refs = [remote.remote(_write_gathered, f"epoch {e} split {s}", job, e, s, hash_ref, *[c[s] for c in pieces])
                for e, s in todo]
        del pieces  # the running tasks hold what they still need
    else:
        refs = [remote.remote(_write_split, f"epoch {e} split {s}", job, e, s, hash_ref) for e, s in todo]
    return collect(refs, on_done)


def collect(refs: list, on_done: Callable[[], None] = lambda: None) -> list:
    """The tasks' results in order (``on_done`` as each arrives); the first failure cancels the rest and is raised as one line."""
    try:
        return [_counted(ray.get(ref), on_done) for ref in refs]
    except ray.exceptions.RayTaskError as exc:
        for ref in refs:
            ray.cancel(ref)
        cause = exc.cause if isinstance(getattr(exc, "cause", None), PrepError) else None
        raise PrepError(str(cause) if cause else one_line(str(exc).splitlines()[-1])) from None
