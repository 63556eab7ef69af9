"""The Ray executor: one Ray task per call, for runs on a cluster.

Chosen when there is a cluster to use (:func:`prep.runtime.executor.resolve`).
It takes the same calls as the local executor (:class:`prep.materialize.executors.local.LocalExecutor`).
A holder call (:meth:`RayExecutor.run_holders`) takes a node's CPUs and runs the local
executor there: it holds its group's rows and writes its splits on that node's threads,
so a run on Ray does what a local run does, every node working. When the driver's node
may run holders, its share of them (every ``N``-th call, ``N`` the eligible nodes) runs in
the driver, one after another, its CPUs reserved for it (a placement group on that node):
a Ray worker would first import Ray, pyarrow and Lance, ~3 CPU-s a job on a one-node
Ray, more than a GSM8K x16 epoch's whole materialize costs. The others are Ray generator
tasks on the other nodes, each streaming its splits' results to the driver as they are
written; none is ever submitted for the driver's node, whose CPUs the reservation holds
(a one-node Ray runs every holder in the driver). Shared values go to the object store
(:meth:`RayExecutor.put`). Plain calls run on the shared :class:`prep.runtime.executor.RayRunner`
(prepare's too), holders are this stage's own tasks on top of it, with its CPUs, resources and
retries. A task's error cancels the others and is re-raised in the driver as one line naming
where it happened.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Iterator, Mapping, Sequence

import pyarrow as pa
import ray
import ray.util.client
from ray.util.placement_group import NODE_ID_LABEL_KEY, placement_group, remove_placement_group

from prep.materialize.executors import local
from prep.materialize.budget import Budget
from prep.materialize.resolved import Call, run_task
from prep.runtime.executor import RayRunner, in_order, ray_error
from prep.runtime.ray_cluster import init_ray, use_worker_env

__all__ = ["RayExecutor"]


def _released(fn: Callable[..., Any], where: str, *args: Any) -> Any:
    """A task that hands its Arrow memory back to the OS when done: a worker runs many tasks, each holding a split."""
    use_worker_env()
    try:
        return run_task(fn, where, *args)
    finally:
        pa.default_memory_pool().release_unused()


def _hold(fn: Callable[..., Iterator], threads: int, budget: Budget, *args: Any) -> Iterator:
    """A holder call: ``fn(*args, executor)`` with a local executor of ``threads`` threads within ``budget``, its results as
    its splits are written; the held rows' memory goes back to the OS at the end."""
    try:
        with local.LocalExecutor(threads, budget) as threads_here:
            yield from fn(*args, threads_here)
    finally:
        pa.default_memory_pool().release_unused()


def _holder(fn: Callable[..., Iterator], threads: int, budget: Budget, *args: Any) -> Iterator:
    """A holder call on one node, as a Ray generator task, each result streamed to the driver as its split
    is written (the progress bar)."""
    use_worker_env()
    yield from _hold(fn, threads, budget, *args)


def _may_run(node: Mapping[str, Any], resources: Mapping[str, float]) -> bool:
    """Whether this run's tasks may go to ``node`` (an entry of ``ray.nodes()``): alive, a CPU, ``resources``."""
    offers = node["Resources"]
    return bool(node.get("Alive")) and offers.get("CPU", 0) >= 1 and all(offers.get(k, 0) >= v for k, v in resources.items())


def _nodes_cpus(resources: Mapping[str, float]) -> list[int]:
    """The CPUs of each live node that offers ``resources`` (where this run's tasks may go)."""
    return [int(n["Resources"]["CPU"]) for n in ray.nodes() if _may_run(n, resources)]


def _driver_node(resources: Mapping[str, float]) -> str | None:
    """The ID of this driver's node when a holder may run there, else None (a head without CPUs, one
    without the ``resources`` the run's tasks ask for, or a Ray Client session: its process is off the cluster)."""
    if ray.util.client.ray.is_connected():
        return None
    here = ray.get_runtime_context().get_node_id()
    return next((here for n in ray.nodes() if n.get("NodeID") == here and _may_run(n, resources)), None)


class RayExecutor:
    """Runs calls as Ray tasks (1 CPU each, on nodes offering ``resources``, retried as
    :class:`prep.runtime.executor.RayRunner` says); a context manager.

    Holder calls take the CPUs of the smallest node that may run them; runs make as many as
    nodes at least (:attr:`min_holders`), so that every node works.

    Args:
        address: cluster to join (default ``RAY_ADDRESS``, else a local Ray).
        num_cpus: CPUs of a local Ray (default: all).
        resources: custom Ray resources each task asks for (pins tasks to nodes).
        budget: the memory a holder may use on its node (default: a quarter of this machine's).
    """

    def __init__(self, address: str | None, num_cpus: int | None, resources: Mapping[str, float] | None = None,
                 budget: Budget | None = None) -> None:
        init_ray(address, num_cpus=num_cpus)
        wanted = dict(resources) if resources else None
        nodes = _nodes_cpus(wanted or {}) or [1]
        self.budget = budget or local.default_budget()  # per holder: one runs at a time on a node
        self.hold_bytes = self.budget.hold_bytes
        self.min_holders = len(nodes)
        self.threads = self._threads = min(nodes)
        self._driver_node = _driver_node(wanted or {})
        self.runner = RayRunner(num_cpus=1, resources=wanted)  # the shared runner, which plain calls run on
        self._holder = self.runner.remote(_holder, num_cpus=self._threads, num_returns="streaming")

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass  # the tasks' results are collected (or cancelled) by run()

    def put(self, value: Any) -> Any:
        """A value every call shares, put in the object store once (None stays None)."""
        return self.runner.put(value)

    def run(self, calls: Sequence[Call], on_done: Callable[[], None] = lambda: None) -> list:
        """The calls' results in order (``on_done`` as each arrives); the first failure cancels the rest.

        Raises:
            PrepError: the first call that failed, naming its ``where``.
        """
        return in_order(self.runner, _released, [(c.fn, c.where, *c.args) for c in calls], lambda _: on_done())

    def run_holders(self, calls: Sequence[Call], on_done: Callable[[], None] = lambda: None) -> list:
        """Holder calls (``fn(*args, executor)``, yielding results), each running a local executor on one node:
        every ``N``-th (``N`` the eligible nodes) in this driver, one after another, when its node may run them
        (:class:`_HeldHere`), the others as Ray generator tasks, which only the other nodes can take; their
        results, in the order they arrive (``on_done`` as each does).

        Raises:
            PrepError: the first holder that failed, as it names its error.
        """
        if not calls:
            return []
        step = self.min_holders
        here = _HeldHere(calls[::step], self._driver_node, self._threads, self.budget) if self._driver_node else None
        try:
            remote = [c for i, c in enumerate(calls) if i % step] if here else calls
            streams = [self._holder.remote(c.fn, self._threads, self.budget, *c.args) for c in remote]
            return _collect(streams, on_done, here, self.runner.retries)
        finally:
            if here is not None:
                here.close()


class _HeldHere:
    """Holder calls run in the driver, one after another on a thread, once its node's ``threads`` CPUs are
    reserved for them (so Ray schedules nothing else on them, the other holders included); their results are
    queued for :func:`_drain`, which reports them on the driver's thread as it does a task's."""

    def __init__(self, calls: Sequence[Call], node: str, threads: int, budget: Budget) -> None:
        self.results: queue.SimpleQueue = queue.SimpleQueue()
        self._calls, self._threads, self._budget, self._stop = calls, threads, budget, threading.Event()
        self._reserved = placement_group([{"CPU": threads}], strategy="STRICT_PACK",
                                         bundle_label_selector=[{NODE_ID_LABEL_KEY: node}])
        try:  # reserved before any holder task is submitted, so that none is placed on this node
            ray.get(self._reserved.ready())  # the node's CPUs free, as a holder task would wait for them
        except BaseException:
            remove_placement_group(self._reserved)
            raise
        self._thread = threading.Thread(target=self._run, name="prep-holder", daemon=True)
        self._thread.start()

    def _each(self) -> Iterator:
        """The results of the calls, one call after another."""
        for call in self._calls:
            args = [ray.get(a) if isinstance(a, ray.ObjectRef) else a for a in call.args]  # as a task gets them
            yield from _hold(call.fn, self._threads, self._budget, *args)

    def _run(self) -> None:
        try:
            for result in self._each():
                self.results.put((True, result))
                if self._stop.is_set():
                    break
        except BaseException as exc:  # handed to the driver's thread, which raises it
            self.results.put((False, exc))
        self.results.put((False, None))

    def close(self) -> None:
        """Stops after the split in hand (when a task failed), and gives the CPUs back."""
        self._stop.set()
        self._thread.join()
        remove_placement_group(self._reserved)


_POLL_S = 0.05  # with a holder in the driver: how often the tasks' streams and the driver's holder are looked at


def _drain(streams: list, on_done: Callable[[], None], here: _HeldHere | None = None) -> list:
    """Every result of the generator tasks' ``streams`` and of the holder ``here``, taken from whichever has
    one ready (so one node's progress and failures are seen while another's holder still runs)."""
    results, pending, running_here = [], list(streams), here is not None
    while pending or running_here:
        ready, pending = ray.wait(pending, num_returns=1, timeout=_POLL_S if running_here else None) if pending \
            else ([], pending)
        for stream in ready:
            try:
                ref = next(stream)
            except StopIteration:
                continue
            results.append(_counted(ray.get(ref), on_done))
            pending.append(stream)
        while running_here:
            try:
                ok, value = here.results.get(timeout=0 if pending else _POLL_S)
            except queue.Empty:
                break
            if ok:
                results.append(_counted(value, on_done))
            elif value is None:
                running_here = False
            else:
                raise value
    return results


def _counted(result: Any, on_done: Callable[[], None]) -> Any:
    on_done()
    return result


def _collect(streams: list, on_done: Callable[[], None], here: _HeldHere | None, retries: int) -> list:
    """The results of the generator tasks' ``streams`` and of the holder ``here`` as they are ready (``on_done``
    as each arrives); the first failure cancels the rest and is raised as one line (:func:`prep.runtime.executor.ray_error`;
    a failure of ``here`` as it was raised)."""
    try:
        return _drain(streams, on_done, here)
    except BaseException as exc:
        for stream in streams:
            ray.cancel(stream)
        if not isinstance(exc, ray.exceptions.RayError):
            raise
        raise ray_error(exc, retries) from None
