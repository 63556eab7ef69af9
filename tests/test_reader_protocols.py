"""The reader's protocols held to the classes that implement them, by the type checker.

:func:`conformance` is never called: tests/test_types.py runs mypy (strict) on this module,
and each assignment below is an error there when a class stops following its protocol (a
missing ``get_state``, an ``open_split`` that returns something no stage can read, ...).
The test here checks the module still names every stage and layout class the reader has.
"""

from __future__ import annotations

from typing import Any

from prep.reader.batch import Batch
from prep.reader.layouts.materialized import Materialized
from prep.reader.layouts.planned import Planned, PlannedSplit
from prep.reader.stage import Layout, SplitOpener, SplitReader, Stage
from prep.reader.stages.batcher import Batcher
from prep.reader.stages.cached import CachedLayout, CachedSplit
from prep.reader.stages.pipeline import Pipeline
from prep.reader.stages.prefetch import Prefetcher
from prep.reader.stages.source import ChunkSource, RawChunk, SplitTable
from prep.reader.stages.transform import Transformer
from prep.reader.workers.shipping import _Iterated


def conformance(source: ChunkSource, io: Prefetcher[RawChunk], batcher: Batcher, transformer: Transformer,
                pipeline: Pipeline, iterated: _Iterated, materialized: Materialized, planned: Planned,
                cached: CachedLayout, table: SplitTable, planned_split: PlannedSplit, cached_split: CachedSplit) -> None:
    """Each implementation assigned to its protocol (checked by mypy, never run)."""
    chunks: list[Stage[RawChunk]] = [source, io]
    batches: list[Stage[Batch]] = [batcher, transformer, pipeline]
    anything: Stage[Any] = iterated
    layouts: list[Layout] = [materialized, planned]
    openers: list[SplitOpener] = [materialized, planned, cached]
    splits: list[SplitReader] = [table, planned_split, cached_split]
    del chunks, batches, anything, layouts, openers, splits


def test_every_stage_and_layout_class_is_held_to_its_protocol() -> None:
    """A new class with a stage's, a layout's or an opened split's methods is added to :func:`conformance` too."""
    import importlib
    import inspect
    import pkgutil

    import prep.reader

    members = {"next", "get_state", "reset", "shutdown"}
    found: set[str] = set()
    for info in pkgutil.walk_packages(prep.reader.__path__, "prep.reader."):
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__ or getattr(cls, "_is_protocol", False):
                continue
            if members <= set(vars(cls)) or "open_split" in vars(cls) or "read_splits" in vars(cls):
                found.add(name)
    checked = {str(p.annotation).split("[")[0] for p in inspect.signature(conformance).parameters.values()}
    assert found and found <= checked, f"not held to their protocol in conformance(): {sorted(found - checked)}"
