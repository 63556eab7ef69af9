"""Every reader stage passes the same save/load round trip (reset(get_state()) continues exactly)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import reader_fixtures as rf
from prep.reader.batcher import Batcher
from prep.reader.manifest import Materialized
from prep.reader.prefetch import Prefetcher
from prep.reader.schedule import Schedule
from prep.reader.source import ChunkSource
from prep.reader.spec import spec_from_metadata
from prep.reader.transform import Transformer

pytestmark = pytest.mark.skipif(not rf.GSM8K.exists(), reason=f"real data not found at {rf.SHARED_DATA}")


def items(stage: Any, limit: int | None = None) -> list:
    out = []
    while limit is None or len(out) < limit:
        try:
            out.append(stage.next())
        except StopIteration:
            break
    return out


def run_save_load_round_trip(make: Callable[[], Any], keys: Callable[[list], list], midpoints: list[int]) -> None:
    """Stops after ``m`` items, saves the state, resets a new stage to it: the rest must follow exactly.

    Also checks a reset to the start and a reset to the state at the end (nothing more)."""
    stage = make()
    full = keys(items(stage))
    end_state = stage.get_state()
    stage.shutdown()
    for m in midpoints:
        first = make()
        head = items(first, m)
        state = first.get_state()
        first.shutdown()
        second = make()
        second.reset(state)
        tail = items(second)
        second.shutdown()
        assert keys(head) + keys(tail) == full, f"midpoint {m}"
    again = make()
    again.reset(None)
    assert keys(items(again)) == full
    again.reset(end_state)
    assert items(again) == []
    again.shutdown()


@pytest.fixture(scope="module")
def parts():
    path, _ = rf.cached_output("sft48")
    layout = Materialized.open(path)
    schedule = Schedule.build(layout.split_rows, layout.epochs, 2)
    spec = spec_from_metadata(layout.metadata)
    return layout, schedule, spec


def _source(parts, splits=range(8, 16)):
    layout, schedule, spec = parts
    return ChunkSource(layout=layout, schedule=schedule, splits=splits, columns=spec.columns, max_steps=4)


def chunk_keys(chunks: list) -> list:
    return [(c.epoch, int(s), tuple(c.rows.columns["id"][c.rows.rows(i, i + 1, 2)].tolist()))
            for c in chunks for i, s in enumerate(c.steps)]


def batch_keys(batches: list) -> list:
    return [(b.epoch, b.step, tuple(b.ids.tolist())) for b in batches]


def test_chunk_source_round_trip(parts):
    run_save_load_round_trip(lambda: _source(parts), chunk_keys, [1, 2, 4])


def test_prefetcher_round_trip(parts):
    run_save_load_round_trip(lambda: Prefetcher(_source(parts), depth=2, name="io", size=lambda c: c.num_rows),
                             chunk_keys, [1, 3])


def test_batcher_round_trip(parts):
    _, schedule, spec = parts
    make = lambda: Batcher(Prefetcher(_source(parts), depth=2, name="io"), schedule=schedule, spec=spec)  # noqa: E731
    run_save_load_round_trip(make, batch_keys, [1, 5, 6, 11])


def test_transformer_round_trip(parts):
    _, schedule, spec = parts

    def make():
        batcher = Batcher(_source(parts), schedule=schedule, spec=spec, threads=1)
        return Transformer(Prefetcher(batcher, depth=3, name="batch"), lambda b: b, num_threads=2)

    run_save_load_round_trip(make, batch_keys, [2, 7])
