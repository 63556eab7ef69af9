"""Where a stage's tasks run: the one executor choice, how ``auto`` resolves, and the two runners
that prepare and materialize both run their tasks on.

Both runners take the same call, ``as_done(fn, items)``: ``fn(*args)`` for each ``(key, args)`` of
``items``, each ``(key, result)`` yielded as it finishes, a bounded number in flight; the first error
drops the calls not started (cancels them on Ray) and is raised once the running ones are done or
cancelled. What a stage adds on top stays in the stage: prepare's sandboxes
(:mod:`prep.prepare.isolation`), materialize's holders placed per node
(:mod:`prep.materialize.executors.on_ray`).

Ray retries a task whose worker died :data:`MAX_TASK_RETRIES` times, never unlimited (prepare's
``max_task_retries`` config key sets it per job). This module imports neither Ray nor Lance: the CLI
reads :data:`EXECUTORS` at start-up.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor, as_completed, wait
from contextlib import closing
from typing import Any, Callable, Generator, Iterable, Literal, Mapping, Protocol, Sequence, TypeVar, get_args

from prep.errors import PrepError, one_line
from prep.runtime.ray_cluster import use_ray

__all__ = ["Executor", "EXECUTORS", "Resolved", "MAX_TASK_RETRIES", "resolve", "Runner", "LocalRunner", "RayRunner",
           "in_order", "ray_error"]

Executor = Literal["auto", "ray", "local"]
"""Where a stage runs its tasks: ``auto`` (Ray when there is a cluster, else this process), ``ray`` or ``local``."""
EXECUTORS: tuple[str, ...] = get_args(Executor)
Resolved = Literal["ray", "local"]
"""An :data:`Executor` once ``auto`` is resolved (:func:`resolve`)."""
MAX_TASK_RETRIES = 3
"""Ray's retries of a task whose worker died (killed, out of memory, its node lost), in every stage."""

K = TypeVar("K")
R = TypeVar("R")


def resolve(executor: str, address: str | None = None) -> Resolved:
    """``executor`` with ``auto`` resolved: Ray when there is a cluster to use
    (:func:`prep.runtime.ray_cluster.use_ray`: ``address``, ``RAY_ADDRESS`` or a Ray already up), else local.

    >>> resolve("local", "ray://head:10001"), resolve("auto", "ray://head:10001"), resolve("ray")
    ('local', 'ray', 'ray')

    Raises:
        PrepError: ``executor`` is not one of :data:`EXECUTORS`.
    """
    if executor == "ray":
        return "ray"
    if executor == "local":
        return "local"
    if executor != "auto":
        raise PrepError(f"executor={executor!r} is not one of {list(EXECUTORS)}")
    return "ray" if use_ray(address) else "local"


class Runner(Protocol):
    """What both runners offer (:class:`LocalRunner`, :class:`RayRunner`)."""

    def put(self, value: Any) -> Any:
        """``value`` as every call receives it: shared once, not copied per call (None stays None)."""

    def as_done(self, fn: Callable[..., R], items: Iterable[tuple[K, tuple[Any, ...]]]) -> Generator[tuple[K, R], None, None]:
        """``(key, fn(*args))`` for each ``(key, args)`` of ``items``, as each finishes (see the module docstring)."""


def in_order(runner: Runner, fn: Callable[..., R], calls: Sequence[tuple[Any, ...]],
             on_result: Callable[[R], None] = lambda result: None) -> list[R]:
    """``fn(*args)`` for each ``args`` of ``calls`` on ``runner``, the results in the calls' order (``on_result``
    sees each as it arrives); the first error stops the rest (:meth:`Runner.as_done`)."""
    results: dict[int, R] = {}
    with closing(runner.as_done(fn, enumerate(calls))) as done:
        for index, result in done:
            results[index] = result
            on_result(result)
    return [results[i] for i in range(len(calls))]


_KEPT: dict[str, tuple[int, ThreadPoolExecutor]] = {}  # by name: a stage's pool and its size, kept across jobs


class LocalRunner:
    """Calls on ``threads`` threads of this process (default: its CPUs); a context manager.

    ``kept``: the threads outlive the runner, for the next runner of that ``name`` and size (prepare's: each
    thread feeds its own sandbox process, which stays warm between jobs, as Ray's workers do); otherwise
    leaving the runner drops the calls not started and waits for the running ones.
    """

    def __init__(self, threads: int | None, name: str, *, kept: bool = False) -> None:
        self.threads = threads or os.cpu_count() or 1
        self._kept = kept
        if not kept:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix=name)
            return
        size, pool = _KEPT.get(name, (0, None))
        if pool is not None and size != self.threads:  # another size replaces it
            pool.shutdown()
            pool = None
        self._pool = pool or ThreadPoolExecutor(self.threads, thread_name_prefix=name)
        _KEPT[name] = (self.threads, self._pool)

    def __enter__(self) -> "LocalRunner":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._kept:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def put(self, value: Any) -> Any:
        """``value`` itself: the threads share this process's memory."""
        return value

    def as_done(self, fn: Callable[..., R], items: Iterable[tuple[K, tuple[Any, ...]]]) -> Generator[tuple[K, R], None, None]:
        """``(key, fn(*args))`` as each finishes; leaving early (an error, the caller's included) drops the
        calls not started and waits for the running ones, so that nothing writes behind the caller's cleanup."""
        futures = {self._pool.submit(fn, *args): key for key, args in items}
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:
            for future in futures:
                future.cancel()
            wait(futures)


class RayRunner:
    """Calls as Ray tasks of ``num_cpus`` CPUs each on the nodes offering ``resources``, a few per CPU of the
    cluster in flight (``ray.wait`` scans what it is given); Ray retries a task whose worker died ``retries``
    times. Ray must be up (:func:`prep.runtime.ray_cluster.init_ray`).
    """

    def __init__(self, *, num_cpus: float = 1.0, resources: Mapping[str, float] | None = None,
                 retries: int = MAX_TASK_RETRIES) -> None:
        import ray

        self.retries = retries
        self.task_options = dict(num_cpus=num_cpus, resources=dict(resources) if resources else None, max_retries=retries)
        """The Ray options of this runner's tasks."""
        cpus = float(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]
        self.window = max(8, 4 * int(cpus / num_cpus))
        self._tasks: dict[Callable[..., Any], Any] = {}

    def put(self, value: Any) -> Any:
        """``value`` in the object store, once (None stays None)."""
        import ray

        return ray.put(value) if value is not None else None

    def remote(self, fn: Callable[..., Any], **options: Any) -> Any:
        """``fn`` as a Ray task with this runner's CPUs, resources and retries (``options`` on top: a stage's
        own tasks, e.g. materialize's holders, streamed and taking a node's CPUs)."""
        import ray

        if fn not in self._tasks:
            self._tasks[fn] = ray.remote(fn)
        return self._tasks[fn].options(**{**self.task_options, **options})

    def as_done(self, fn: Callable[..., R], items: Iterable[tuple[K, tuple[Any, ...]]]) -> Generator[tuple[K, R], None, None]:
        """``(key, fn(*args))`` as each task finishes; leaving early cancels the tasks in flight.

        Raises:
            PrepError: a task failed (:func:`ray_error`).
        """
        import ray

        task = self.remote(fn)
        todo = iter(items)
        pending: dict[Any, K] = {}  # ref -> key
        try:
            while True:
                while len(pending) < self.window and (item := next(todo, None)) is not None:
                    pending[task.remote(*item[1])] = item[0]
                if not pending:
                    return
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    key = pending.pop(ref)
                    yield key, ray.get(ref)
        except ray.exceptions.RayError as exc:
            raise ray_error(exc, self.retries) from None
        finally:
            for ref in pending:
                ray.cancel(ref)


def ray_error(exc: BaseException, retries: int) -> PrepError:
    """A Ray task's failure as one line: a :class:`PrepError` the task raised as it was raised, another
    error of the task by its last line, a task whose worker kept dying with the retries it had."""
    import ray

    cause = getattr(exc, "cause", None)
    if isinstance(cause, PrepError):
        return PrepError(str(cause))
    text = str(exc).strip()
    if isinstance(exc, ray.exceptions.RayTaskError):
        return PrepError(one_line(text.splitlines()[-1]))
    first = text.splitlines()[0] if text else ""
    return PrepError(f"a Ray task failed after {retries} retries (max_task_retries): {type(exc).__name__}: {first}")
