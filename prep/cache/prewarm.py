"""``prep prewarm``: the reader cache's fetch stage, run ahead of time for one rank.

It fills a :class:`prep.cache.store.SplitCache` (the layout the reader uses with ``cache_dir=``)
with the rank's splits (:func:`prep.plan.order.splits_for_rank`), several splits at once, each
verified against the manifest before it counts. Running it again fetches only what is
missing or damaged; a kill leaves nothing that counts as a copy. With ``max_bytes`` it
stops adding splits once the next one does not fit (copies of epochs it was not asked
for are evicted first). The cache directory also opens as a materialized output.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from prep.cache.store import SplitCache
from prep.io.materialized import read_manifest
from prep.errors import PrepError
from prep.io import storage
from prep.io.transfer import Fetcher
from prep.plan.order import splits_for_rank
from prep.runtime.world import rank_and_world_size
from prep.runtime.progress import Bar

__all__ = ["prewarm"]

log = logging.getLogger(__name__)


def prewarm(
    path: str,
    *,
    cache: str,
    rank: int | None = None,
    world_size: int | None = None,
    epochs: Sequence[int] | None = None,
    overwrite: bool = False,
    s3: storage.S3Options | None = None,
    max_bytes: int | None = None,
    threads: int = 16,
    progress: bool = False,
) -> dict[str, Any]:
    """Copies rank ``rank`` of ``world_size``'s splits of ``path`` into ``cache`` and verifies them.

    Args:
        path: materialized output (local path or ``s3://``).
        cache: local cache directory.
        rank: this rank (default: resolved by :func:`prep.runtime.world.rank_and_world_size`).
        world_size: number of ranks (default: ``WORLD_SIZE``, else 1); must divide the splits.
        epochs: epochs to copy (default: all in the manifest).
        overwrite: replace a cache holding a different materialization (default False).
        s3: S3 endpoint/keys/retries (default: the AWS environment).
        max_bytes: the most bytes the cache may hold (default: no limit).
        threads: splits fetched at once (default 16: a split is often one large object, so
            splits at once is requests in flight).
        progress: show a progress bar (splits, MB/s, retries, ETA) on stderr when it is a terminal.

    Returns:
        A summary: cache, rank, world_size, splits, epochs, copied (by this run), cached (there
        already, or copied meanwhile by another process using the cache), skipped (did not fit),
        bytes, retries, seconds.

    Raises:
        PrepError: no manifest, a world size that does not divide the splits, an epoch not
            in the manifest, a cache holding another plan, a split that stays unreadable
            (named), or a copy whose checksum does not match.
    """
    t0 = time.time()
    s3 = (s3 or storage.S3Options()).resolved()
    manifest = read_manifest(path, s3)
    rank, world_size = rank_and_world_size(rank, world_size)
    splits = splits_for_rank(manifest.plan.num_splits, rank, world_size)
    by_epoch = {e.epoch: e for e in manifest.epochs}
    wanted = list(epochs) if epochs is not None else sorted(by_epoch)
    missing = [e for e in wanted if e not in by_epoch]
    if missing:
        raise PrepError(f"epochs {missing} are not in {path} (it has {sorted(by_epoch)}); materialize them first")
    fetcher = Fetcher(s3)
    store = SplitCache(cache, source=path, manifest=manifest, max_bytes=max_bytes, overwrite=overwrite, fetcher=fetcher)
    keys = [(e, sp) for e in wanted for sp in splits]
    todo = [k for k in keys if not _cached(store, k)]
    order = {k: i for i, k in enumerate(keys)}

    def priority(key: tuple[int, int], used: float) -> tuple[float, float] | None:
        return None if key in order else (0, used)  # only copies prewarm was not asked for make room

    skipped: list[tuple[int, int]] = []
    bar = Bar(len(todo), "prewarm", unit="split", show=progress)  # drawn on a terminal only, never with --quiet
    try:
        with ThreadPoolExecutor(max(1, threads), thread_name_prefix="prewarm") as pool:
            for key, ok in zip(todo, pool.map(lambda k: store.fetch(k, priority), todo)):
                if not ok:
                    skipped.append(key)
                done = fetcher.counters()
                bar.update(1, MB_s=done.bytes / max(time.time() - t0, 1e-9) / 1e6, retries=done.retries)
    finally:
        bar.close()
        fetcher.shutdown()
        store.close()
    counters = fetcher.counters()
    summary = {"cache": store.root, "rank": rank, "world_size": world_size, "splits": list(splits), "epochs": wanted,
               "copied": store.copies, "cached": len(keys) - store.copies - len(skipped), "skipped": len(skipped),
               "bytes": counters.bytes, "retries": counters.retries, "seconds": time.time() - t0}
    log.info("prewarm %s -> %s: %s", path, cache, summary)
    return summary


def _cached(store: SplitCache, key: tuple[int, int]) -> bool:
    lease = store.acquire(key)
    if lease is None:
        return False
    lease.release()
    return True
