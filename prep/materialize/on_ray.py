"""The Ray executor: one Ray task per call, for runs on a cluster.

Chosen when there is a cluster to use (:func:`prep.runtime.ray_cluster.use_ray`).
It takes the same calls as the local executor (:class:`prep.materialize.local.LocalExecutor`).
A holder call (:meth:`RayExecutor.run_holders`) is one Ray generator task that takes
a node's CPUs and runs the local executor there: it holds its group's rows in the
worker's memory and writes its splits on that node's threads, streaming each split's
result to the driver as it is written, so a run on Ray does what a local run does,
with one holder per node at least. Shared values go to the object
store (:meth:`RayExecutor.put`); rows too many for a few holders go through the
gather pass (:mod:`prep.materialize.gather`, map tasks through :meth:`RayExecutor.scatter`).
A task's error cancels the others and is re-raised in the driver as one line naming
where it happened.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Sequence

import pyarrow as pa
import ray

from prep.errors import PrepError, one_line
from prep.materialize import local
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


def _holder(fn: Callable[..., Iterator], threads: int, *args: Any) -> Iterator:
    """A holder call on one node, as a Ray generator task: ``fn(*args, executor)`` with a local executor of
    ``threads`` threads, each result streamed to the driver as its split is written (the progress bar)."""
    use_worker_env()
    try:
        with local.LocalExecutor(threads) as threads_here:
            yield from fn(*args, threads_here)
    finally:
        pa.default_memory_pool().release_unused()


def _nodes_cpus(resources: Mapping[str, float]) -> list[int]:
    """The CPUs of each live node that offers ``resources`` (where this run's tasks may go)."""
    return [int(n["Resources"]["CPU"]) for n in ray.nodes()
            if n.get("Alive") and n["Resources"].get("CPU", 0) >= 1
            and all(n["Resources"].get(k, 0) >= v for k, v in resources.items())]


class RayExecutor:
    """Runs calls as Ray tasks (1 CPU each, retried twice, on nodes offering ``resources``); a context manager.

    Holder calls take the CPUs of the smallest node that may run them, and there
    are as many as nodes at least (:attr:`min_holders`), so that every node works.

    Args:
        address: cluster to join (default ``RAY_ADDRESS``, else a local Ray).
        num_cpus: CPUs of a local Ray (default: all).
        resources: custom Ray resources each task asks for (pins tasks to nodes).
    """

    gathers = True  # rows too many for a few holders go through the object store (the gather pass)

    def __init__(self, address: str | None, num_cpus: int | None, resources: Mapping[str, float] | None = None) -> None:
        init_ray(address, num_cpus=num_cpus)
        wanted = dict(resources) if resources else None
        nodes = _nodes_cpus(wanted or {}) or [1]
        self.hold_bytes = local.HOLD_BYTES  # per holder, in a worker's memory
        self.min_holders = len(nodes)
        self._threads = min(nodes)
        self._remote = ray.remote(num_cpus=1, max_retries=2, resources=wanted)(_released)
        self._holder = ray.remote(num_cpus=self._threads, max_retries=2, resources=wanted)(_holder)

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

    def run_holders(self, calls: Sequence[Call], on_done: Callable[[], None] = lambda: None) -> list:
        """Holder calls (``fn(*args, executor)``, yielding results), each a Ray generator task running a local
        executor on one node; their results, in the order they arrive (``on_done`` as each does).

        Raises:
            PrepError: the first holder that failed, as it names its error.
        """
        streams = [self._holder.options(num_returns="streaming").remote(c.fn, self._threads, *c.args) for c in calls]
        return _collect(streams, on_done, streamed=True)


def _drain(streams: list, on_done: Callable[[], None]) -> list:
    """Every result of the generator tasks' ``streams``, taken from whichever stream has one ready (so
    one node's progress and failures are seen while another's holder still runs)."""
    results, pending = [], list(streams)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        for stream in ready:
            try:
                ref = next(stream)
            except StopIteration:
                continue
            results.append(_counted(ray.get(ref), on_done))
            pending.append(stream)
    return results


def _counted(result: Any, on_done: Callable[[], None]) -> Any:
    on_done()
    return result


def _collect(refs: list, on_done: Callable[[], None] = lambda: None, streamed: bool = False) -> list:
    """The tasks' results in order (``on_done`` as each arrives; ``streamed``: each ref is a generator task's
    stream, and the results come as they are ready); the first failure cancels the rest and is raised as one line."""
    try:
        if streamed:
            return _drain(refs, on_done)
        return [_counted(ray.get(ref), on_done) for ref in refs]
    except ray.exceptions.RayTaskError as exc:
        for ref in refs:
            ray.cancel(ref)
        cause = exc.cause if isinstance(getattr(exc, "cause", None), PrepError) else None
        raise PrepError(str(cause) if cause else one_line(str(exc).splitlines()[-1])) from None
