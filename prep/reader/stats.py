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
        cache_hits: split opens served by a verified copy in the reader cache (``cache_dir``).
        cache_misses: split opens that found no usable copy (read from the remote meanwhile).
        cache_evictions: copies this process evicted to stay under ``cache_max_bytes``.
        cache_damaged: copies found damaged (size or CRC-32 off), fetched again.
        fetched_bytes: bytes the fetch stage copied from the remote.
        fetched_objects: objects (files) it copied.
        fetch_retries: requests it retried (throttling, 5xx, resets, timeouts, short bodies).
        fetch_throttled: of those, the ones the store throttled (503 SlowDown, 429): the request
            concurrency halved each time.
        fetch_failures: splits it gave up on (read from the remote instead; the warning names them).
        fetch_object_s: seconds spent per object fetched, summed (latency = this / fetched_objects).
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
    cache_hits: int = 0
    cache_misses: int = 0
    cache_evictions: int = 0
    cache_damaged: int = 0
    fetched_bytes: int = 0
    fetched_objects: int = 0
    fetch_retries: int = 0
    fetch_throttled: int = 0
    fetch_failures: int = 0
    fetch_object_s: float = 0.0

    def merged(self, other: "StatsSnapshot") -> "StatsSnapshot":
        """The sum of two pipelines' counters (wall time: the longer; first batch: the earlier)."""
        out = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)
               if f.name not in ("wall_s", "first_batch_s")}
        firsts = [x for x in (self.first_batch_s, other.first_batch_s) if x is not None]
        return StatsSnapshot(wall_s=max(self.wall_s, other.wall_s), first_batch_s=min(firsts) if firsts else None, **out)

    def replace(self, **changes: object) -> "StatsSnapshot":
        return dataclasses.replace(self, **changes)

    @property
    def cache(self) -> str:
        """``cache 12 hit/4 miss, 120.5 MB fetched (31 ms/object), 3 retries`` ('' without a reader cache)."""
        if not (self.cache_hits or self.cache_misses or self.fetched_objects):
            return ""
        latency = self.fetch_object_s / max(1, self.fetched_objects) * 1e3
        return (f"cache {self.cache_hits} hit/{self.cache_misses} miss, {self.fetched_bytes / 1e6:,.1f} MB fetched "
                f"({latency:,.0f} ms/object), {self.fetch_retries} retries")

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

    Example:
        >>> a = StatsSnapshot(wall_s=1.0)
        >>> b = StatsSnapshot(wall_s=2.0, consumed_rows=134, consumed_tokens=11101, prefetched_rows=48704)
        >>> status_line(a, b, epoch=0, num_epochs=3, step=100, consumer="gpu")
        'epoch 1/3 step 100 | 11,101 tok/s | 134.0 rows/s | 0/0/48704/134 | gpu-bound'
    """
    wall = max(cur.wall_s - prev.wall_s, 1e-9)
    rates = f"{(cur.consumed_rows - prev.consumed_rows) / wall:,.1f} rows/s"
    if tokens:
        rates = f"{(cur.consumed_tokens - prev.consumed_tokens) / wall:,.0f} tok/s | {rates}"
    cache = f" | {cur.cache}" if cur.cache else ""
    return (f"epoch {epoch + 1}/{num_epochs} step {step} | {rates} | {cur.depths} | "
            f"{verdict(prev, cur, consumer=consumer)}{cache}")
