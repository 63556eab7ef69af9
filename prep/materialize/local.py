"""The local executor: a run's calls on a thread pool in this process, without Ray.

Chosen when there is no cluster (:func:`prep.runtime.ray_cluster.use_ray`): on one
machine a fresh Ray costs seconds of start-up and an object store, and buys
nothing, since Lance and Arrow release the GIL while they read, take, hash
and write. It takes the same calls as the Ray executor
(:class:`prep.materialize.on_ray.RayExecutor`), which runs this executor inside
each of its holder tasks: a holder (:meth:`LocalExecutor.run_holders`) reads rows
in sequential passes, holds them (within its :class:`~prep.materialize.budget.Budget`) and
hands each split call the rows it needs (:mod:`prep.materialize.table`, :mod:`prep.materialize.mixture`).
Outputs are identical.
"""

from __future__ import annotations

import os
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, as_completed, wait
from typing import Any, Callable, Iterator, Sequence

from prep.materialize.budget import Budget, default_max_memory
from prep.materialize.resolved import Call, run_task

__all__ = ["LocalExecutor", "default_budget"]


def default_budget() -> Budget:
    """The budget of a run that names none: a quarter of this machine's memory."""
    return Budget(default_max_memory())


class LocalExecutor:
    """Runs calls on ``num_cpus`` threads (default: the CPUs of this machine) within ``budget``; a context manager.

    Leaving it (an error or Ctrl-C included) drops the calls not started; the running ones finish their split.
    """

    def __init__(self, num_cpus: int | None, budget: Budget | None = None) -> None:
        self.budget = budget or default_budget()  # the driver's memory is the tasks' memory: rows read once serve every task
        self.hold_bytes = self.budget.hold_bytes
        self.min_holders = 1  # one process: its holders run one after another on all its threads
        self.threads = num_cpus or os.cpu_count() or 1
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="prep-materialize")

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def put(self, value: Any) -> Any:
        """A value every call shares (nothing to do: the threads share this process's memory)."""
        return value

    def run(self, calls: Sequence[Call], on_done: Callable[[], None] = lambda: None) -> list:
        """The calls' results in order (``on_done`` after each); the first error is raised as soon as it happens.

        Raises:
            PrepError: the first call that failed, naming its ``where``.
        """
        futures = [self._pool.submit(run_task, c.fn, c.where, *c.args) for c in calls]
        for future in futures:
            future.add_done_callback(lambda _: on_done())
        finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in futures if f in finished and f.exception() is not None]
        if failed:
            raise failed[0].exception()
        return [f.result() for f in futures]

    def as_done(self, calls: Sequence[Call]) -> Iterator:
        """The calls' results as each finishes (any order); the first error is raised as soon as it happens,
        and the calls not started are dropped.

        Raises:
            PrepError: the first call that failed, naming its ``where`` (once the running calls have finished).
        """
        futures = [self._pool.submit(run_task, c.fn, c.where, *c.args) for c in calls]
        try:
            for future in as_completed(futures):
                yield future.result()
        finally:
            for future in futures:
                future.cancel()
            wait(futures)  # the running ones finish before the error goes on: nothing writes behind its cleanup

    def run_holders(self, calls: Sequence[Call], on_done: Callable[[], None] = lambda: None) -> list:
        """Holder calls (``fn(*args, executor)``: hold rows, then yield their split calls' results from
        :meth:`as_done` on ``executor``), one after another in this process, on this executor's threads;
        their results, concatenated (``on_done`` after each).

        A holder names where its own errors happen (``run_task`` and :meth:`as_done` inside it).
        """
        records = []
        for c in calls:
            for record in c.fn(*c.args, self):
                records.append(record)
                on_done()
        return records
