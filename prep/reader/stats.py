"""Where the time goes: counters, the one-line status and the bottleneck verdict.

Queue depths are in rows: *unscanned* (still on disk), *raw* (read, not yet in
batches), *prefetched* (in batches the consumer has not taken) and *consumed*.
The verdict compares, over the last interval, how long the consumer waited for
batches with how busy the I/O and batch-building stages were:

* the consumer rarely waited (< 5% of the time): the trainer is the bottleneck
  (``consumer-bound``; ``gpu-bound`` when it trains on a GPU): the reader keeps up;
* it waited and the I/O thread was the busier stage: ``io-bound`` (more/faster disk,
  ``prep prewarm``, larger reads);
* it waited and building batches or the transform was busier: ``cpu-bound``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["StatsSnapshot", "verdict", "status_line", "WAIT_FRACTION_BOUND"]

WAIT_FRACTION_BOUND = 0.05


@dataclass(frozen=True, kw_only=True)
class StatsSnapshot:
    """Cumulative counters of one reader pipeline (or the sum over DataLoader workers).

    Attributes:
        wall_s: seconds since iteration started.
        first_batch_s: seconds from iteration start to the first batch (None before it).
        fetch_s: I/O thread time spent reading and decoding.
        collate_s: time spent building batches.
        transform_s: time spent in the user transform (summed over its threads).
        wait_s: time the consumer waited for a batch.
        bytes_read: decoded bytes read.
        rows_read: rows read.
        unscanned_rows: rows still to read to finish the epochs being read.
        raw_rows: rows read but not yet in batches.
        prefetched_rows: rows in batches waiting for the consumer.
        consumed_rows: rows handed to the consumer.
        consumed_tokens: real tokens handed to the consumer.
        consumed_batches: batches handed to the consumer.
    """

    wall_s: float = 0.0
    first_batch_s: float | None = None
    fetch_s: float = 0.0
    collate_s: float = 0.0
    transform_s: float = 0.0
    wait_s: float = 0.0
    bytes_read: int = 0
    rows_read: int = 0
    unscanned_rows: int = 0
    raw_rows: int = 0
    prefetched_rows: int = 0
    consumed_rows: int = 0
    consumed_tokens: int = 0
    consumed_batches: int = 0

    def merged(self, other: "StatsSnapshot") -> "StatsSnapshot":
        """The sum of two pipelines' counters (wall time: the longer; first batch: the earlier)."""
        out = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)
               if f.name not in ("wall_s", "first_batch_s")}
        firsts = [x for x in (self.first_batch_s, other.first_batch_s) if x is not None]
        return StatsSnapshot(wall_s=max(self.wall_s, other.wall_s), first_batch_s=min(firsts) if firsts else None, **out)

    def replace(self, **changes: object) -> "StatsSnapshot":
        return dataclasses.replace(self, **changes)

    @property
    def depths(self) -> str:
        """``unscanned/raw/prefetched/consumed`` rows."""
        return f"{self.unscanned_rows}/{self.raw_rows}/{self.prefetched_rows}/{self.consumed_rows}"


def verdict(prev: StatsSnapshot, cur: StatsSnapshot, *, consumer: str = "consumer") -> str:
    """``{consumer}-bound``, ``io-bound`` or ``cpu-bound`` over the interval ``prev`` -> ``cur``.

    Example:
        >>> verdict(StatsSnapshot(), StatsSnapshot(wall_s=10, wait_s=0.1, fetch_s=2, collate_s=1))
        'consumer-bound'
        >>> verdict(StatsSnapshot(), StatsSnapshot(wall_s=10, wait_s=6, fetch_s=9, collate_s=1))
        'io-bound'
    """
    wall = max(cur.wall_s - prev.wall_s, 1e-9)
    if (cur.wait_s - prev.wait_s) / wall < WAIT_FRACTION_BOUND:
        return f"{consumer}-bound"
    io = cur.fetch_s - prev.fetch_s
    cpu = (cur.collate_s - prev.collate_s) + (cur.transform_s - prev.transform_s)
    return "io-bound" if io >= cpu else "cpu-bound"


def status_line(prev: StatsSnapshot, cur: StatsSnapshot, *, epoch: int, num_epochs: int, step: int,
                tokens: bool = True, consumer: str = "consumer") -> str:
    """One line: position, rates over the interval, queue depths, verdict.

    Epochs are numbered from 0 as in the manifest, the reader state, ``prep read``, HF
    Trainer's ``state.epoch`` and Lightning's ``current_epoch``: ``epoch 0 of 3`` is the first.

    Example:
        >>> a = StatsSnapshot(wall_s=1.0)
        >>> b = StatsSnapshot(wall_s=2.0, consumed_rows=134, consumed_tokens=11101, prefetched_rows=48704)
        >>> status_line(a, b, epoch=0, num_epochs=3, step=100, consumer="gpu")
        'epoch 0 of 3 step 100 | 11,101 tok/s | 134.0 rows/s | 0/0/48704/134 | gpu-bound'
    """
    wall = max(cur.wall_s - prev.wall_s, 1e-9)
    rates = f"{(cur.consumed_rows - prev.consumed_rows) / wall:,.1f} rows/s"
    if tokens:
        rates = f"{(cur.consumed_tokens - prev.consumed_tokens) / wall:,.0f} tok/s | {rates}"
    return (f"epoch {epoch} of {num_epochs} step {step} | {rates} | {cur.depths} | "
            f"{verdict(prev, cur, consumer=consumer)}")
