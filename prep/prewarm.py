"""``prep prewarm``: copy one rank's split datasets to a local cache, verified.

The cache is laid out like the materialized output (``CACHE/manifest.json``,
``CACHE/epoch-EEEEE/split-SSSSS.lance``) but holds only the splits of one rank
(:func:`prep.world.splits_for_rank`), so the reader can open the cache directory
instead of the remote output. Each copied split is re-checksummed against the
manifest before it counts; a ``split-SSSSS.done.json`` beside it records that, so
running prewarm again copies only what is missing or damaged. The manifest is
written last.

``CACHE/_prep_cache.json`` is written first and marks the directory as prewarm's:
a non-empty ``--cache`` without it is refused (whatever the flags), and
``--overwrite`` removes only the files of the layout above, never anything else.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from typing import Any, Sequence

from prep import lance_io, storage, world
from prep.checksum import dataset_checksum
from prep.errors import PrepError, one_line
from prep.jsonfile import read_json_file
from prep.manifest import MANIFEST, read_manifest, split_path, write_manifest
from prep.materialize.layout import owned_entries

__all__ = ["prewarm"]

log = logging.getLogger(__name__)

CACHE_MARKER = "_prep_cache.json"
_JOB = "prep prewarm"


def _copy_tree(src: str, dest: str, s3: storage.S3Options) -> int:
    """Copies a split dataset beside ``dest``, then moves it into place; returns its bytes."""
    fs, path = storage.filesystem(src, s3)
    tmp = f"{dest}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        if storage.is_remote(src):
            fs.get(path.rstrip("/") + "/", tmp, recursive=True)
        else:
            shutil.copytree(path, tmp)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PrepError(f"{src} cannot be copied ({one_line(exc)}): run `prep verify` on the output") from None
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(dest) for f in files)


def _claim_cache(cache: str, source: str, fingerprint: str, overwrite: bool) -> None:
    """Makes ``cache`` prewarm's for this materialization, touching nothing prewarm did not write.

    Raises:
        PrepError: ``cache`` is a file, a non-empty directory without prewarm's
            marker, or prewarm's cache of another materialization (without ``overwrite``).
    """
    fix = "choose an empty or new --cache (prep never deletes what it did not write)"
    if os.path.exists(cache) and not os.path.isdir(cache):
        raise PrepError(f"--cache {cache} is a file, not a directory: {fix}")
    marker = os.path.join(cache, CACHE_MARKER)
    if os.path.isdir(cache) and os.listdir(cache):
        if not os.path.exists(marker):
            raise PrepError(f"--cache {cache} is not empty and is not a prep prewarm cache (no {CACHE_MARKER}): {fix}")
        old = read_json_file(marker, None, fix)
        if not isinstance(old, dict) or old.get("job") != _JOB:
            raise PrepError(f"{marker} was not written by {_JOB}: {fix}")
        if old.get("fingerprint") != fingerprint:
            if not overwrite:
                raise PrepError(
                    f"cache {cache} holds materialization {old.get('fingerprint')}, not {fingerprint} "
                    f"of {source}; pass --overwrite or use another --cache"
                )
            _remove_owned(cache)
    storage.write_json_atomic(marker, {"job": _JOB, "source": source, "fingerprint": fingerprint})


def _remove_owned(cache: str) -> None:
    """Removes prewarm's files (the materialized layout) from ``cache``; anything else stays."""
    top = os.listdir(cache)
    inside = {d: os.listdir(os.path.join(cache, d)) for d in top if os.path.isdir(os.path.join(cache, d))}
    for rel in owned_entries(top, inside, names=(MANIFEST,)):
        full = os.path.join(cache, rel)
        shutil.rmtree(full) if os.path.isdir(full) else os.remove(full)
    for d in inside:
        if os.path.isdir(os.path.join(cache, d)) and not os.listdir(os.path.join(cache, d)):
            os.rmdir(os.path.join(cache, d))


def prewarm(
    path: str,
    *,
    cache: str,
    rank: int | None = None,
    world_size: int | None = None,
    epochs: Sequence[int] | None = None,
    overwrite: bool = False,
    s3: storage.S3Options | None = None,
) -> dict[str, Any]:
    """Copies rank ``rank`` of ``world_size``'s splits of ``path`` into ``cache`` and verifies them.

    Args:
        path: materialized output (local path or ``s3://``).
        cache: local cache directory.
        rank: this rank (default: resolved by :func:`prep.world.rank_and_world_size`).
        world_size: number of ranks (default: ``WORLD_SIZE``, else 1); must divide the splits.
        epochs: epochs to copy (default: all in the manifest).
        overwrite: replace a cache holding a different materialization (default False).
        s3: S3 endpoint/keys (default: the AWS environment).

    Returns:
        A summary: cache, rank, world_size, splits, epochs, copied, cached, bytes, seconds.

    Raises:
        PrepError: no manifest, a world size that does not divide the splits, an
            epoch not in the manifest, a cache holding another plan, or a copy
            whose checksum does not match.
    """
    t0 = time.time()
    s3 = (s3 or storage.S3Options()).resolved()
    manifest = read_manifest(path, s3)
    rank, world_size = world.rank_and_world_size(rank, world_size)
    splits = world.splits_for_rank(manifest.plan.num_splits, rank, world_size)
    by_epoch = {e.epoch: e for e in manifest.epochs}
    wanted = list(epochs) if epochs is not None else sorted(by_epoch)
    missing = [e for e in wanted if e not in by_epoch]
    if missing:
        raise PrepError(f"epochs {missing} are not in {path} (it has {sorted(by_epoch)}); materialize them first")
    cache = os.path.abspath(cache)
    _claim_cache(cache, path, manifest.fingerprint, overwrite)
    summary = {"cache": cache, "rank": rank, "world_size": world_size, "splits": list(splits), "epochs": wanted,
               "copied": 0, "cached": 0, "bytes": 0}
    for e in wanted:
        for sp in by_epoch[e].splits:
            if sp.split not in splits:
                continue
            rel = split_path(e, sp.split)
            dest = os.path.join(cache, rel)
            marker = dest[: -len(".lance")] + ".done.json"
            if os.path.exists(marker) and os.path.isdir(dest):
                try:
                    rec = storage.read_json(marker)
                except ValueError:  # a damaged record: copy the split again
                    rec = {}
                if rec.get("checksum") == sp.checksum and rec.get("fingerprint") == manifest.fingerprint:
                    summary["cached"] += 1
                    continue
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            summary["bytes"] += _copy_tree(storage.join(path, rel), dest, s3)
            try:
                rows, checksum = dataset_checksum(dest)
            except (OSError, ValueError) as exc:
                lance_io.remove_table(dest)
                raise PrepError(
                    f"{storage.join(path, rel)} cannot be read ({one_line(exc)}): run `prep verify {path}`"
                ) from None
            if rows != sp.num_rows or checksum != sp.checksum:
                lance_io.remove_table(dest)
                raise PrepError(
                    f"copy of {rel} from {path} does not match the manifest ({rows} rows, checksum {checksum[:12]}...; "
                    f"expected {sp.num_rows} rows, {sp.checksum[:12]}...): run `prep verify {path}`"
                )
            storage.write_json_atomic(marker, {"fingerprint": manifest.fingerprint, "epoch": e, "split": sp.split,
                                               "num_rows": rows, "checksum": checksum})
            summary["copied"] += 1
    write_manifest(cache, manifest)
    summary["seconds"] = time.time() - t0
    log.info("prewarm %s -> %s: %s", path, cache, summary)
    return summary
