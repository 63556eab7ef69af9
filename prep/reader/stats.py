"""Where the time goes: counters, the one-line status and the bottleneck verdict.

Queue depths are in rows: *unscanned* (still on disk), *raw* (read, not yet in
batches), *prefetched* (in batches the consumer has not taken) and *consumed*.
The verdict (:func:`diagnose`, the one implementation behind the status line and
``prep bench``) compares, over an interval, how long the consumer waited for
batches with how busy the I/O and batch-building stages were:

* the consumer rarely waited (< 5% of the time): the trainer is the bottleneck
  (``consumer-bound``; ``gpu-bound`` when it trains on a GPU): the reader keeps up;
* it waited and the I/O thread was the busier stage: ``io-bound``, from object
  storage (``remote-io``: ``prep prewarm``) or local disk (``local-io``: larger reads);
* it waited and building batches or the transform was busier: ``cpu-bound``
  (``collate``: more ``batch_threads``; ``transform``: more ``transform_threads``).

Each stage comes with the knob to turn (:data:`KNOBS`, also in docs/tuning.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["StatsSnapshot", "Stage", "Verdict", "KNOBS", "diagnose", "verdict", "status_line", "source_shares", "WAIT_FRACTION_BOUND"]

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
        source_rows: in a mixture, rows handed to the consumer per source (else empty).
        source_tokens: in a mixture, real tokens handed to the consumer per source (else empty).
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
    source_rows: tuple[int, ...] = ()
    source_tokens: tuple[int, ...] = ()
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
               if f.name not in ("wall_s", "first_batch_s", "source_rows", "source_tokens")}
        for name in ("source_rows", "source_tokens"):  # per source: element-wise
            a, b = getattr(self, name), getattr(other, name)
            out[name] = tuple(x + y for x, y in zip(a, b)) if a and b else (a or b)
        firsts = [x for x in (self.first_batch_s, other.first_batch_s) if x is not None]
        return StatsSnapshot(wall_s=max(self.wall_s, other.wall_s), first_batch_s=min(firsts) if firsts else None, **out)

    def replace(self, **changes: Any) -> "StatsSnapshot":
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


Stage = Literal["consumer", "remote-io", "local-io", "collate", "transform"]

KNOBS: dict[Stage, str] = {
    "consumer": "nothing to tune in the reader: it keeps up; a faster training step (or a larger batch) moves the bound",
    "remote-io": "copy the rank's splits to local disk first (`prep prewarm`), or raise read_bytes (fewer, larger "
                 "requests) and raw_chunks (more reads in flight)",
    "local-io": "raise read_bytes (larger sequential reads) and raw_chunks (reads queued ahead), put the splits on faster "
                "disk, or materialize only the columns you train on (--columns); a prepared table read directly "
                "(plan=...) is read by random takes: materialize it for sequential reads",
    "collate": "raise batch_threads (threads building batches) and prefetch_batches (batches built ahead)",
    "transform": "raise transform_threads, or move that work into the prepare job so it runs once, offline",
}


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """Which stage bounds reading over an interval, and the knob to turn.

    Attributes:
        stage: the bounding stage (see :data:`KNOBS`).
        label: the status line's word: ``{consumer}-bound``, ``io-bound`` or ``cpu-bound``.
        wait_fraction: share of the interval the consumer spent waiting for batches.
        knob: what to change, in words.
    """

    stage: Stage
    label: str
    wait_fraction: float
    knob: str


def diagnose(prev: StatsSnapshot, cur: StatsSnapshot, *, remote: bool = False, consumer: str = "consumer") -> Verdict:
    """The stage that bounds reading over the interval ``prev`` -> ``cur``.

    Args:
        prev: counters at the start of the interval (``StatsSnapshot()``: since iteration started).
        cur: counters at its end.
        remote: the splits are read from object storage (``s3://``), not a local disk. Over an
            interval where every split opened came from the reader cache (hits, no misses), the
            reads were local whatever the path says.
        consumer: what consumes the batches, for the label (``gpu``: ``gpu-bound``).

    Example:
        >>> v = diagnose(StatsSnapshot(), StatsSnapshot(wall_s=10, wait_s=6, fetch_s=1, collate_s=2, transform_s=7))
        >>> v.stage, v.label, v.wait_fraction
        ('transform', 'cpu-bound', 0.6)
        >>> slow_io = dict(wall_s=10, wait_s=6, fetch_s=9)
        >>> diagnose(StatsSnapshot(), StatsSnapshot(**slow_io, cache_misses=1), remote=True).stage
        'remote-io'
        >>> diagnose(StatsSnapshot(), StatsSnapshot(**slow_io, cache_hits=4), remote=True).stage
        'local-io'
    """
    wall = max(cur.wall_s - prev.wall_s, 1e-9)
    waited = (cur.wait_s - prev.wait_s) / wall
    io = cur.fetch_s - prev.fetch_s
    collate, transform = cur.collate_s - prev.collate_s, cur.transform_s - prev.transform_s
    stage: Stage
    if waited < WAIT_FRACTION_BOUND:
        stage, label = "consumer", f"{consumer}-bound"
    elif io >= collate + transform:
        from_cache = cur.cache_hits > prev.cache_hits and cur.cache_misses == prev.cache_misses
        stage, label = ("remote-io" if remote and not from_cache else "local-io"), "io-bound"
    else:
        stage, label = ("transform" if transform > collate else "collate"), "cpu-bound"
    return Verdict(stage=stage, label=label, wait_fraction=round(waited, 4), knob=KNOBS[stage])


def verdict(prev: StatsSnapshot, cur: StatsSnapshot, *, consumer: str = "consumer") -> str:
    """``{consumer}-bound``, ``io-bound`` or ``cpu-bound`` over the interval ``prev`` -> ``cur`` (:func:`diagnose`'s label).

    Example:
        >>> verdict(StatsSnapshot(), StatsSnapshot(wall_s=10, wait_s=0.1, fetch_s=2, collate_s=1))
        'consumer-bound'
        >>> verdict(StatsSnapshot(), StatsSnapshot(wall_s=10, wait_s=6, fetch_s=9, collate_s=1))
        'io-bound'
    """
    return diagnose(prev, cur, consumer=consumer).label


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
    cache = f" | {cur.cache}" if cur.cache else ""
    return (f"epoch {epoch} of {num_epochs} step {step} | {rates} | {cur.depths} | "
            f"{verdict(prev, cur, consumer=consumer)}{cache}")


def source_shares(cur: StatsSnapshot) -> str:
    """What a mixture's consumer has seen so far, per source: its shares of rows and of tokens ("" for one table).

    Example:
        >>> source_shares(StatsSnapshot(source_rows=(75, 25), source_tokens=(6000, 4000)))
        'sources rows 0.750/0.250 tokens 0.600/0.400 (75/25 rows, 6,000/4,000 tokens)'
    """
    if not cur.source_rows:
        return ""
    rows, tokens = sum(cur.source_rows) or 1, sum(cur.source_tokens) or 1
    return (f"sources rows {'/'.join(f'{r / rows:.3f}' for r in cur.source_rows)} "
            f"tokens {'/'.join(f'{t / tokens:.3f}' for t in cur.source_tokens)} "
            f"({'/'.join(str(r) for r in cur.source_rows)} rows, {'/'.join(f'{t:,}' for t in cur.source_tokens)} tokens)")
