"""The Ray executor: one Ray task per call, for runs on a cluster.

Chosen when there is a cluster to use (:func:`prep.runtime.ray_cluster.use_ray`).
It takes the same calls as the local executor (:class:`prep.materialize.local.LocalExecutor`).
Workers do not share the driver's memory (:attr:`RayExecutor.hold_bytes` is 0):
shared values go to the object store (:meth:`RayExecutor.put`), and a single table's
small clumps go through the gather pass (:mod:`prep.materialize.gather`, map tasks
through :meth:`RayExecutor.scatter`). A task's error cancels the others and is
re-raised in the driver as one line naming the call's ``where``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa
import ray

from prep.errors import PrepError, one_line
from prep.materialize.resolved import Call, run_task
from prep.runtime.ray_cluster import init_ray, use_worker_env

__all__ = ["RayExecutor"]


def _released(fn: Callable[..., Any], where: str, *args: Any) -> Any:
    """A task that hands its Arrow memory back to the OS when done: a worker runs many tasks, each holding a split."""
    use_worker_env()
    try:
        return run_task(fn, where, *args)
    finally:
        pa.default_memory_pool().release_unused()


class RayExecutor:
    """Runs calls as Ray tasks (1 CPU each, retried twice, on nodes offering ``resources``); a context manager.

    Args:
        address: cluster to join (default ``RAY_ADDRESS``, else a local Ray).
        num_cpus: CPUs of a local Ray (default: all).
        resources: custom Ray resources each task asks for (pins tasks to nodes).
    """

    hold_bytes = 0  # tasks run in other processes, often on other machines: the driver holds no rows for them

    def __init__(self, address: str | None, num_cpus: int | None, resources: Mapping[str, float] | None = None) -> None:
        init_ray(address, num_cpus=num_cpus)
        self._remote = ray.remote(num_cpus=1, max_retries=2, resources=dict(resources) if resources else None)(_released)

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass  # the tasks' results are collected (or cancelled) by run()

    def put(self, value: Any) -> Any:
        """A value every call shares, put in the object store once (None stays None)."""
        return ray.put(value) if value is not None else None

    def scatter(self, calls: Sequence[Call], num_returns: int) -> list[list]:
        """Submits the calls without waiting, each returning ``num_returns`` values; their refs, [call][value]."""
        refs = [self._remote.options(num_returns=num_returns).remote(c.fn, c.where, *c.args) for c in calls]
        return [r if isinstance(r, list) else [r] for r in refs]

    def run(self, calls: Sequence[Call], on_done: Callable[[], None] = lambda: None) -> list:
        """The calls' results in order (``on_done`` as each arrives); the first failure cancels the rest.

        Raises:
            PrepError: the first call that failed, naming its ``where``.
        """
        return _collect([self._remote.remote(c.fn, c.where, *c.args) for c in calls], on_done)


def _counted(record: Any, on_done: Callable[[], None]) -> Any:
    on_done()
    return record


def _collect(refs: list, on_done: Callable[[], None] = lambda: None) -> list:
    """The tasks' results in order (``on_done`` as each arrives); the first failure cancels the rest and is raised as one line."""
    try:
        return [_counted(ray.get(ref), on_done) for ref in refs]
    except ray.exceptions.RayTaskError as exc:
        for ref in refs:
            ray.cancel(ref)
        cause = exc.cause if isinstance(getattr(exc, "cause", None), PrepError) else None
        raise PrepError(str(cause) if cause else one_line(str(exc).splitlines()[-1])) from None
