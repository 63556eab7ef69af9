"""``prep bench``: the reader against a simulated consumer, and which stage bounds it.

A training step is simulated by sleeping ``consumer_ms`` per batch (0: take
batches as fast as they come), which, like a GPU step, leaves the CPU to the
reader's threads. The counters are the reader's own (:class:`prep.reader.stats.StatsSnapshot`)
and so is the verdict (:func:`prep.reader.stats.diagnose`): bench only samples them
over time, so what it says is what the status line of a real training run says.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from prep.io import storage
from prep.errors import PrepError
from prep.reader import ReaderDataset
from prep.reader.loader import require_steps
from prep.reader.stats import StatsSnapshot, Verdict, diagnose

__all__ = ["Sample", "BenchResult", "run_bench", "format_result"]


@dataclass(frozen=True)
class Sample:
    """The reader's counters at one moment of the run (``t`` seconds after the start)."""

    t: float
    consumed_rows: int
    consumed_tokens: int
    unscanned_rows: int
    raw_rows: int
    prefetched_rows: int
    wait_s: float

    @classmethod
    def of(cls, s: StatsSnapshot, t: float) -> "Sample":
        return cls(t=t, consumed_rows=s.consumed_rows, consumed_tokens=s.consumed_tokens,
                   unscanned_rows=s.unscanned_rows, raw_rows=s.raw_rows, prefetched_rows=s.prefetched_rows, wait_s=s.wait_s)


@dataclass
class BenchResult:
    """What a bench run measured; ``verdict`` covers the run after each pass's first batch; ``passes`` over the data."""

    path: str
    rank: int
    world_size: int
    global_batch_size: int
    local_batch_size: int
    consumer_ms: float
    steps: int
    seconds: float
    rows_per_s: float
    tokens_per_s: float
    first_batch_s: float | None
    wait_fraction: float
    verdict: Verdict
    passes: int
    samples: list[Sample] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def run_bench(path: str, *, global_batch_size: int, rank: int | None = None, world_size: int | None = None,
              consumer_ms: float = 0.0, seconds: float = 10.0, sample_every: float = 0.25,
              on_status: Callable[[str], None] | None = None, **reader: Any) -> BenchResult:
    """Reads ``path`` for ``seconds`` (passing over the data again if it ends sooner), sleeping ``consumer_ms`` per batch.

    Args:
        path: a materialized output (or a prepared table with ``plan=...`` in ``reader``).
        global_batch_size, rank, world_size: as for :class:`~prep.reader.ReaderDataset`.
        consumer_ms: simulated training step per batch, in milliseconds (0: as fast as possible).
        seconds: how long to read.
        sample_every: seconds between samples of the counters (and status lines).
        on_status: called with the reader's status line at each sample.
        reader: more :class:`~prep.reader.ReaderDataset` arguments (read_bytes, batch_threads, transform...).

    Raises:
        PrepError: an argument that cannot work (negative time), data with no full global step, or what
            the reader raises for the path.
    """
    if consumer_ms < 0 or seconds <= 0 or sample_every <= 0:
        raise PrepError(f"consumer_ms={consumer_ms} must be >= 0, seconds={seconds} and sample_every={sample_every} > 0")
    ds = ReaderDataset(path, global_batch_size=global_batch_size, rank=rank, world_size=world_size, **reader)
    require_steps(ds)  # else 0 rows/s would read as a reader that keeps up
    samples: list[Sample] = []
    steps, passes, done, startup, next_sample = 0, 0, StatsSnapshot(), StatsSnapshot(), 0.0
    t0 = time.perf_counter()  # the real clock: a new pass's start-up counts against throughput, as an epoch's does
    while True:
        pass_steps, it = 0, iter(ds)
        for _ in it:
            steps, pass_steps = steps + 1, pass_steps + 1
            if pass_steps == 1:  # each pass's start-up is reported apart (time to first batch), not in the verdict
                startup = _plus(startup, ds.stats())
            if consumer_ms:
                time.sleep(consumer_ms / 1000)
            now, elapsed = _plus(done, ds.stats()), time.perf_counter() - t0
            if elapsed >= next_sample:
                samples.append(Sample.of(now, elapsed))
                if on_status is not None:
                    on_status(f"{elapsed:.1f}/{seconds:g}s | {ds.status_line()}")
                next_sample = elapsed + sample_every
            if elapsed >= seconds:
                break
        done = _plus(done, ds.stats())
        it.close()  # stops this pass's reader threads
        passes += 1
        if time.perf_counter() - t0 >= seconds or pass_steps == 0:
            break
    wall = time.perf_counter() - t0
    samples.append(Sample.of(done, wall))
    verdict = diagnose(startup, done, remote=storage.is_remote(path))
    return BenchResult(path=path, rank=ds.rank, world_size=ds.world_size, global_batch_size=global_batch_size,
                       local_batch_size=ds.local_batch_size, consumer_ms=consumer_ms, steps=steps, passes=passes,
                       seconds=round(wall, 3), rows_per_s=round(done.consumed_rows / wall, 1),
                       tokens_per_s=round(done.consumed_tokens / wall, 1),
                       first_batch_s=None if done.first_batch_s is None else round(done.first_batch_s, 4),
                       wait_fraction=verdict.wait_fraction, verdict=verdict, samples=samples)


_ADDED_UP = ("wall_s", "fetch_s", "collate_s", "transform_s", "wait_s", "bytes_read", "rows_read", "consumed_rows",
             "consumed_tokens", "consumed_batches")


def _plus(done: StatsSnapshot, cur: StatsSnapshot) -> StatsSnapshot:
    """Counters of the finished passes over the data plus the current one (queue depths: the current pass's)."""
    first = done.first_batch_s if done.first_batch_s is not None else cur.first_batch_s
    return cur.replace(first_batch_s=first, **{k: getattr(done, k) + getattr(cur, k) for k in _ADDED_UP})


def format_result(r: BenchResult) -> str:
    """The human summary: throughput, first batch, consumer wait, the bounding stage and its knob."""
    first = "-" if r.first_batch_s is None else f"{r.first_batch_s * 1000:,.0f} ms"
    tokens = f"{r.tokens_per_s:,.0f} tok/s, " if r.tokens_per_s else ""
    end = f"{r.passes} pass{'es' if r.passes > 1 else ''} over the data"
    return "\n".join([
        f"{r.path}: rank {r.rank}/{r.world_size}, {r.steps} steps of {r.local_batch_size} rows in {r.seconds:.1f}s ({end}), "
        f"consumer {r.consumer_ms:g} ms/step",
        f"  throughput: {tokens}{r.rows_per_s:,.1f} rows/s, {r.steps / max(r.seconds, 1e-9):,.1f} steps/s",
        f"  first batch: {first}; consumer waited {r.wait_fraction:.1%} of the time after it",
        f"  bound by: {r.verdict.stage} ({r.verdict.label})",
        f"  knob: {r.verdict.knob}",
    ])
