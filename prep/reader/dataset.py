"""The torch ``IterableDataset``: whole local batches from a materialized output.

Each ``iter()`` runs a :class:`~prep.reader.stages.pipeline.Pipeline` of stages on bounded
queues: an I/O thread, a batch-building thread, an optional transform pool.

Use it with ``DataLoader(ds, batch_size=None, num_workers=0)`` (recommended: the
threads already overlap I/O, batching and training), through :class:`prep.reader.Loader`,
or with torchdata's ``StatefulDataLoader(ds, batch_size=None, num_workers=N)``: in a
DataLoader worker ``state_dict``/``load_state_dict`` describe that worker's own next step,
which is what ``StatefulDataLoader`` snapshots per worker and hands back on resume.
Safe to fork before or after iterating: threads and Lance datasets belong to the
process that iterates (see :mod:`prep.reader.workers.forksafe`).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Generator, Iterator, Mapping, Sequence

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from prep.io import storage
from prep.cache.store import SplitCache
from prep.errors import PrepError
from prep.plan.spec import PlanSpec
from prep.reader.workers import forksafe, lifeline
from prep.reader import state as st
from prep.reader.batch import Batch
from prep.reader.stages.cached import CacheFiller
from prep.reader.layouts import open_layout
from prep.reader.options import ReaderOptions
from prep.reader.stages.pipeline import Pipeline
from prep.reader.schedule import Schedule
from prep.reader.spec import TEXT_KINDS, row_bytes
from prep.reader.stats import StatsSnapshot, source_shares, status_line
from prep.plan.order import Share
from prep.runtime.world import rank_and_world_size

__all__ = ["ReaderDataset"]

log = logging.getLogger(__name__)


class ReaderDataset(IterableDataset[Batch]):
    """Local batches of one rank, in step order, resumable at any step.

    Args:
        path: a materialized output (``prep materialize-shuffle``), or a prepared Lance table
            when ``plan`` is given.
        global_batch_size: rows per global step, any ``G >= 1`` (a mixture: a multiple of its global batch);
            the global order of :mod:`prep.plan.order` says which rows form each step.
        rank: this rank (default: an initialised ``torch.distributed`` group, else ``RANK``, else
            ``SLURM_PROCID``, else 0; see :func:`prep.runtime.world.rank_and_world_size`).
        world_size: ranks (default: from the same source as the rank); must divide ``global_batch_size``.
            Each rank takes ``G / W`` rows a step; when ``W`` also divides the splits, only from its own.
        epochs: which epochs to read (default: all in the manifest; with ``plan``: an int n reads 0..n-1).
        plan: read a prepared table directly with this shuffle plan (a :class:`prep.plan.spec.PlanSpec`,
            or some of its keys: the rest default).
        s3: where to reach ``s3://`` URIs (default: the environment).
        cache_dir: a local directory for verified copies of this rank's splits (see
            :mod:`prep.reader.stages.cached`): read from there when a copy is there, else from
            the remote while a background stage copies it (default: no cache). The
            directory ``prep prewarm --cache`` fills.
        cache_max_bytes: the most bytes the cache may hold (default: no limit); less than
            an epoch works: splits that do not fit are read from the remote.
        options: how batches are built and delivered (:class:`~prep.reader.options.ReaderOptions`;
            default: its defaults).
        **knobs: any field of :class:`~prep.reader.options.ReaderOptions` as a keyword (``transform``,
            ``pad_id``, ``image_keys``, ``pin_memory``, ``read_bytes``, ``fetch_threads``, ...), over ``options``.

    Example:
        >>> ds = ReaderDataset("out/", global_batch_size=96)          # doctest: +SKIP
        >>> for batch in DataLoader(ds, batch_size=None):              # doctest: +SKIP
        ...     loss = model(**batch).loss
        ...     ckpt = {"reader": ds.state_dict()}                     # resumes after this batch
    """

    def __init__(self, path: str, *, global_batch_size: int, rank: int | None = None, world_size: int | None = None,
                 epochs: int | Sequence[int] | None = None, plan: PlanSpec | Mapping[str, Any] | None = None,
                 s3: storage.S3Options | None = None, cache_dir: str | None = None, cache_max_bytes: int | None = None,
                 options: ReaderOptions | None = None, **knobs: Any) -> None:
        super().__init__()
        self.options = ReaderOptions.of(options, knobs)
        self.layout, chosen = open_layout(path, global_batch_size=global_batch_size, plan=plan, epochs=epochs, s3=s3)
        if cache_dir is not None and self.layout.manifest is None:
            raise PrepError(f"cache_dir works with a materialized output, not with a prepared table ({path}) read "
                            "through an on-the-fly plan, which reads the table in place")
        self.rank, self.world_size = rank_and_world_size(rank, world_size)
        self.global_batch_size = global_batch_size
        self.share = Share(global_batch_size, self.layout.num_splits, self.rank, self.world_size,
                           order_batch=self.layout.mixture_batch)
        self.splits = self.share.splits  # the splits this rank reads (its own when the world size divides them)
        self.schedule = Schedule.build(self.layout.split_rows, chosen, self.share)
        self.local_batch_size = self.share.local_batch_size
        self.spec = self.options.collate_spec(self.layout.metadata, sources=len(self.layout.mixture_tables or ()),
                                              columns=self.layout.columns)
        if self.layout.metadata.inferred is not None:
            log.warning("%s", self.layout.metadata.inferred)
        self._max_steps = max(1, self.options.read_bytes // max(1, row_bytes(self.layout.metadata, self.spec) * self.local_batch_size))
        self._position = self.schedule.position(0)
        self._pending: tuple[int, int] | None = None
        self._own: int | None = None  # in a DataLoader worker: the next step this worker builds
        self._pipeline: Pipeline | None = None
        self._pid = os.getpid()  # the process _pipeline belongs to
        self._prev = StatsSnapshot()
        self._cache: tuple[str, int | None, storage.S3Options | None] | None = None
        if cache_dir is not None:
            self._split_cache(os.path.abspath(cache_dir), cache_max_bytes, s3)  # claims the directory now
            self._cache = (os.path.abspath(cache_dir), cache_max_bytes, s3)

    # --- length ------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Batches one pass over the epochs being read yields on this rank (every rank takes every step)."""
        return self.schedule.total

    @property
    def steps_per_epoch(self) -> dict[int, int]:
        """``{epoch: steps}`` for this rank: LR schedules and progress bars (see ``docs/trainers/``)."""
        return dict(zip(self.schedule.epochs, self.schedule.steps))

    # --- state -------------------------------------------------------------------------------------
    @property
    def position(self) -> tuple[int, int]:
        """``(epoch, step)`` of the next batch to deliver in this process."""
        return self._pending or self._position

    def state_dict(self) -> dict[str, Any]:
        """What the consumer has taken so far: loading it resumes at the next step.

        In a DataLoader worker: the next step *this worker* builds (what torchdata's
        ``StatefulDataLoader`` keeps per worker).
        """
        info = get_worker_info()
        if info is None:
            return st.make(self, *self.position)
        own = self._own if self._own is not None else min(self.schedule.index(*self._start()) + info.id,
                                                          self.schedule.total)
        return st.make(self, *self.schedule.position(own))

    def state_after(self, batch: Batch) -> dict[str, Any]:
        """The state that resumes right after ``batch`` (the same as ``batch.state``)."""
        return st.make(self, *self.schedule.position(self.schedule.index(batch.epoch, batch.step) + 1))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at ``state`` on the next ``iter()``. Strict: another plan, table or batch size is an error.
        An on-the-fly plan over a table that grew since the state was taken reads the version the
        state pins (the rows it read before), never the newer one.

        In a DataLoader worker, ``state`` is that worker's own next step (see :meth:`state_dict`).
        """
        pinned = st.pinned_layout(self.layout, state)
        if pinned is not None:  # an on-the-fly plan over a table that grew since: read the version the state pins
            log.info("reader state pins %s at version %s (opened at %s): reading that version",
                     self.layout.uri, pinned.source_version, self.layout.source_version)
            self.layout = pinned
            self.schedule = Schedule.build(self.layout.split_rows, self.layout.epochs, self.share)
            self._position = self.schedule.position(0)
        position = st.check(self, state)
        info = get_worker_info()
        if info is not None:  # worker k starts at `start + k`: step back so its first step is `position`
            position = self.schedule.position(max(0, self.schedule.index(*position) - info.id))
        self._pending, self._own = position, None

    def start_at(self, index: int) -> None:
        """The next ``iter()`` starts at global step ``index`` in every process: in DataLoader worker ``k``
        of ``K``, ``index + k, index + k + K, ...`` (how :class:`~prep.reader.Loader`'s workers take over)."""
        self._pending, self._own = self.schedule.position(index), None

    @property
    def dropped_rows(self) -> int:
        """Rows beyond each epoch's last full step (not delivered) in the splits this rank answers for,
        ``[r*S//W, (r+1)*S//W)`` (its own splits when ``W`` divides ``S``): summed over ranks, each once."""
        home = self.share.home_splits
        return int(sum((self.layout.split_rows[e][home.start:home.stop]
                        - self.share.split_starts(np.array([n]))[0, home.start:home.stop]).sum()
                       for e, n in zip(self.schedule.epochs, self.schedule.steps)))

    # --- iteration ---------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Batch]:
        return self.batches()

    def batches(self, *, share: bool = True) -> Generator[Batch, None, None]:
        """This process's batches from where the last pass stopped (or a loaded state).

        In a DataLoader worker each batch is copied into one shared-memory storage to ship,
        unless ``share=False`` (the caller ships them itself, see :mod:`prep.reader.workers.shipping`).
        """
        if self._pid != os.getpid():  # forked: the parent's pipeline (threads, Lance handles) is not ours to touch
            forksafe.keep(self._pipeline)
            self._pipeline, self._pid = None, os.getpid()
        info = get_worker_info()
        if info is not None:  # a DataLoader worker ends when its trainer dies (issue 21 #17)
            lifeline.watch()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        start = self._start()
        self._pending, self._position = None, start
        total = self.schedule.total
        self._own = min(self.schedule.index(*start) + worker, total) if info is not None else None
        pipe = self._pipeline = Pipeline(
            layout=self.layout, schedule=self.schedule, share=self.share, spec=self.spec, options=self.options,
            start=start, worker=worker, num_workers=num_workers, max_steps=self._max_steps,
            fetch=self._fetch_stage(start[0]))
        self._prev = StatsSnapshot()
        try:
            while True:
                try:
                    batch = pipe.next()
                except StopIteration:
                    return
                index = self.schedule.index(batch.epoch, batch.step)
                self._position = self.schedule.position(index + 1)
                batch.set_origin(state=st.make(self, *self._position))
                if info is not None:  # in a DataLoader worker: one storage to ship, counters the parent can't see
                    self._own = min(index + num_workers, total)
                    batch = batch.shared() if share else batch
                    batch.set_origin(worker=worker, stats=pipe.snapshot())
                yield batch
        finally:
            pipe.shutdown()

    def _start(self) -> tuple[int, int]:
        """Where the next ``iter()`` starts: a loaded state, else where the last one stopped (0 after the end)."""
        return self._pending or (self._position if self._position != self.schedule.end else self.schedule.position(0))

    def _split_cache(self, root: str, max_bytes: int | None, s3: storage.S3Options | None) -> SplitCache:
        """The cache at ``root`` for this output, from the manifest the layout already read."""
        return SplitCache(root, source=self.layout.uri, manifest=self.layout.manifest, max_bytes=max_bytes, s3=s3)

    def _fetch_stage(self, epoch: int) -> CacheFiller | None:
        """This process's fetch stage, from ``epoch`` on (None without a cache)."""
        if self._cache is None:
            return None
        epochs = self.schedule.epochs[self.schedule.epochs.index(epoch):]
        return CacheFiller(self._split_cache(*self._cache), tuple(epochs), self.splits,
                          threads=self.options.fetch_threads)

    # --- observability -----------------------------------------------------------------------------
    def stats(self) -> StatsSnapshot:
        """Counters of the current (or last) iteration in this process."""
        return StatsSnapshot() if self._pipeline is None else self._pipeline.snapshot()

    def status_line(self, consumer: str = "consumer") -> str:
        """``epoch 0 of 3 step 100 | 11,101 tok/s | 134.4 rows/s | 0/0/48704/3264 | consumer-bound``.

        Rates and the verdict cover the time since the previous call.
        """
        cur = self.stats()
        prev, self._prev = self._prev, cur
        epoch, step = self.schedule.consumed(self._position)
        line = status_line(prev, cur, epoch=epoch, num_epochs=len(self.layout.epochs), step=step,
                           tokens=self.spec.kind in TEXT_KINDS, consumer=consumer)
        return f"{line} | {source_shares(cur)}" if cur.source_rows else line

    def __getstate__(self) -> dict[str, Any]:
        """Paths, plan and position only: the unpickling process opens its own datasets and threads."""
        return {**self.__dict__, "_pipeline": None}

