"""The local executor: a run's calls on a thread pool in this process, without Ray.

Chosen when there is no cluster (:func:`prep.runtime.executor.resolve`): on one
machine a fresh Ray costs seconds of start-up and an object store, and buys
nothing, since Lance and Arrow release the GIL while they read, take, hash
and write. It takes the same calls as the Ray executor
(:class:`prep.materialize.executors.on_ray.RayExecutor`), which runs this executor inside
each of its holder tasks: a holder (:meth:`LocalExecutor.run_holders`) reads rows
in sequential passes, holds them (within its :class:`~prep.materialize.budget.Budget`) and
hands each split call the rows it needs (:mod:`prep.materialize.table`, :mod:`prep.materialize.mixture.run`).
Outputs are identical.
"""

from __future__ import annotations

from contextlib import closing
from typing import Any, Callable, Iterator, Sequence

from prep.materialize.budget import Budget, default_max_memory
from prep.materialize.resolved import Call, run_task
from prep.runtime.executor import LocalRunner, in_order

__all__ = ["LocalExecutor", "default_budget"]


def default_budget() -> Budget:
    """The budget of a run that names none: a quarter of this machine's memory."""
    return Budget(default_max_memory())


class LocalExecutor:
    """Runs calls on ``num_cpus`` threads (default: the CPUs of this machine) within ``budget``; a context manager.

    The threads are a :class:`prep.runtime.executor.LocalRunner`, as prepare's. Leaving it (an error or
    Ctrl-C included) drops the calls not started; the running ones finish their split.
    """

    def __init__(self, num_cpus: int | None, budget: Budget | None = None) -> None:
        self.budget = budget or default_budget()  # the driver's memory is the tasks' memory: rows read once serve every task
        self.hold_bytes = self.budget.hold_bytes
        self.min_holders = 1  # one process: its holders run one after another on all its threads
        self.runner = LocalRunner(num_cpus, "prep-materialize")  # the shared runner, which every call runs on
        self.threads = self.runner.threads

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.runner.__exit__(*exc)

    def put(self, value: Any) -> Any:
        """A value every call shares (nothing to do: the threads share this process's memory)."""
        return self.runner.put(value)

    def run(self, calls: Sequence[Call], on_done: Callable[[], None] = lambda: None) -> list:
        """The calls' results in order (``on_done`` as each arrives); the first error stops the calls not started.

        Raises:
            PrepError: the first call that failed, naming its ``where``.
        """
        return in_order(self.runner, run_task, [(c.fn, c.where, *c.args) for c in calls], lambda _: on_done())

    def as_done(self, calls: Sequence[Call]) -> Iterator:
        """The calls' results as each finishes (any order); the first error is raised as soon as it happens,
        and the calls not started are dropped.

        Raises:
            PrepError: the first call that failed, naming its ``where`` (once the running calls have finished).
        """
        with closing(self.runner.as_done(run_task, ((i, (c.fn, c.where, *c.args)) for i, c in enumerate(calls)))) as done:
            for _, result in done:
                yield result

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
