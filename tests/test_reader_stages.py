"""Every reader stage passes the same save/load round trip (reset(get_state()) continues exactly),
on tiny tables made in tmp_path: the stages alone, the whole pipeline, and the pipeline through the
reader cache's fetch stage."""

from __future__ import annotations

import os

import pytest

from common.roundtrip import run_save_load_round_trip
from common.tiny import tiny_materialized, tiny_prepared
from prep.cache.store import SplitCache
from prep.reader.stages.batcher import Batcher
from prep.reader.stages.cached import CacheFiller
from prep.reader.layouts.materialized import Materialized
from prep.reader.options import ReaderOptions
from prep.reader.stages.pipeline import Pipeline
from prep.reader.stages.prefetch import Prefetcher
from prep.reader.schedule import Schedule
from prep.reader.stages.source import ChunkSource
from prep.reader.stages.transform import Transformer
from prep.plan.order import Share

SHARE = Share(8, 4, rank=1, world_size=2)  # splits 2 and 3, 2 rows each a step


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """4 splits of 15 rows, 2 epochs; G=8 (2 rows a split a step) -> 7 steps an epoch."""
    base = tmp_path_factory.mktemp("stages")
    prepared = tiny_prepared(str(base / "prepared.lance"), num_rows=60)
    tiny_materialized(str(base / "out"), prepared, num_splits=4, epochs=2)
    layout = Materialized.open(str(base / "out"))
    schedule = Schedule.build(layout.split_rows, layout.epochs, SHARE)
    spec = ReaderOptions().collate_spec(layout.metadata)
    assert schedule.steps == (7, 7)
    return layout, schedule, spec


def _source(parts):
    layout, schedule, spec = parts
    return ChunkSource(layout=layout, schedule=schedule, share=SHARE, columns=spec.columns, max_steps=4)


def chunk_keys(chunks: list) -> list:
    return [(c.epoch, int(s), tuple(c.rows.columns["id"][c.rows.rows(i, i + 1)].tolist()))
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
    run_save_load_round_trip(make, batch_keys, [1, 5, 7, 11])


def test_transformer_round_trip(parts):
    _, schedule, spec = parts

    def make():
        batcher = Batcher(_source(parts), schedule=schedule, spec=spec, threads=1)
        return Transformer(Prefetcher(batcher, depth=3, name="batch"), lambda b: b, num_threads=2)

    run_save_load_round_trip(make, batch_keys, [2, 7])


def _pipeline(parts, fetch=None, **options):
    layout, schedule, spec = parts
    return Pipeline(layout=layout, schedule=schedule, share=SHARE, spec=spec, options=ReaderOptions(**options),
                    start=schedule.position(0), max_steps=3, fetch=fetch)


def test_pipeline_round_trip(parts):
    full = run_save_load_round_trip(lambda: _pipeline(parts, transform=lambda b: b), batch_keys, [1, 6, 9])
    assert [(e, t) for e, t, _ in full] == [(e, t) for e in (0, 1) for t in range(7)]


def test_pipeline_through_the_fetch_stage_round_trip(parts, tmp_path):
    layout, schedule, _ = parts
    direct = run_save_load_round_trip(lambda: _pipeline(parts), batch_keys, [3])
    root = str(tmp_path / "cache")

    def make():
        cache = SplitCache(root, source=layout.uri, manifest=layout.manifest)
        return _pipeline(parts, CacheFiller(cache, schedule.epochs, SHARE.splits, threads=2))

    assert run_save_load_round_trip(make, batch_keys, [1, 8, 12]) == direct
    assert sorted(os.listdir(root))  # the fetch stage did copy splits into the cache
