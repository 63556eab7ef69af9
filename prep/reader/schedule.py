"""Which global steps a reader yields, in which order: pure arithmetic, no I/O.

A position is ``(epoch, step)``: the next global step to deliver. Positions are
numbered across the epochs being read, so "resume at step 5 of epoch 1" is one
integer, a worker's share of the steps is a stride, and a seek costs nothing.
Every epoch has ``S * min(split rows) // G`` steps (the global order of
:mod:`prep.plan.order`, ``docs/architecture.md``); rows past them are dropped for that epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from prep.errors import PrepError
from prep.plan.order import Share

__all__ = ["Schedule"]


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """The steps of the epochs being read.

    Args:
        epochs: epoch numbers, ascending.
        steps: steps in each of those epochs.

    Example:
        >>> s = Schedule(epochs=(0, 1), steps=(3, 2))
        >>> s.total, s.index(1, 0), s.position(4), s.position(5)
        (5, 3, (1, 1), (2, 0))
    """

    epochs: tuple[int, ...]
    steps: tuple[int, ...]

    @classmethod
    def build(cls, split_rows: dict[int, np.ndarray], epochs: tuple[int, ...], share: Share) -> "Schedule":
        """Steps per epoch from the row counts of every split (all ranks') and the global batch."""
        return cls(epochs=epochs, steps=tuple(share.steps_per_epoch(int(split_rows[e].min())) for e in epochs))

    @property
    def total(self) -> int:
        """Steps in all epochs; also the index of the end position."""
        return sum(self.steps)

    @property
    def end(self) -> tuple[int, int]:
        """The position after the last step: ``(last epoch + 1, 0)``."""
        return (self.epochs[-1] + 1, 0)

    def index(self, epoch: int, step: int) -> int:
        """The global index of a position (``total`` for the end).

        Raises:
            PrepError: the position is outside the epochs being read.
        """
        if (epoch, step) == self.end:
            return self.total
        if epoch not in self.epochs:
            raise PrepError(f"epoch={epoch} is not one of the epochs being read {list(self.epochs)}")
        i = self.epochs.index(epoch)
        if not 0 <= step <= self.steps[i]:
            raise PrepError(f"step={step} is outside epoch {epoch}, which has {self.steps[i]} steps")
        return sum(self.steps[:i]) + step

    def position(self, index: int) -> tuple[int, int]:
        """The ``(epoch, step)`` at a global index; a step past an epoch's end is the next epoch's 0."""
        for epoch, n in zip(self.epochs, self.steps):
            if index < n:
                return (epoch, index)
            index -= n
        return self.end

    def consumed(self, position: tuple[int, int]) -> tuple[int, int]:
        """For display: ``(epoch, steps done in it)`` when ``position`` is the next step to deliver."""
        index = self.index(*position)
        if index == 0:
            return self.epochs[0], 0
        epoch, step = self.position(index - 1)
        return epoch, step + 1

    def chunks(self, start: int, worker: int, num_workers: int, max_steps: int) -> Iterator[tuple[int, np.ndarray]]:
        """This worker's steps from ``start`` on, grouped into reads of at most ``max_steps`` steps.

        Worker ``k`` of ``K`` takes global indices ``start+k, start+k+K, ...``: a DataLoader's
        round robin over its workers then yields them in step order. Reads never cross an epoch
        and grow from 1 step (a fast first batch) by x4 to ``max_steps``.

        Yields:
            ``(epoch, steps)``: the epoch and the int64 step numbers of one read, ascending.
        """
        index, size = start + worker, 1
        while index < self.total:
            epoch, step = self.position(index)
            last = self.steps[self.epochs.index(epoch)] - 1
            count = min(size, (last - step) // num_workers + 1)
            yield epoch, step + num_workers * np.arange(count, dtype=np.int64)
            index += count * num_workers
            size = min(size * 4, max_steps)
