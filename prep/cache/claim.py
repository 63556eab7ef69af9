"""Claiming a reader cache for one materialization, touching nothing prep did not write.

The cache is claimed with its marker (:class:`prep.contracts.cache_marker.CacheMarker`,
written first): prep writes only into an empty folder or its own cache, and replacing
another materialization's cache (``overwrite``) removes only the cache's own files
(:func:`prep.io.claims.remove_owned`), only while no other process uses it.
"""

from __future__ import annotations

import glob
import logging
import os

from prep.cache import locks
from prep.cache.records import CacheLayout
from prep.contracts.cache_marker import CACHE_JOB, CACHE_MARKER, CacheMarker
from prep.contracts.manifest import MANIFEST, Manifest
from prep.io.claims import remove_owned, write_cache_marker
from prep.errors import PrepError
from prep.io import storage
from prep.io.jsonfile import read_json_file
from prep.io.transfer import remove_tree

__all__ = ["claim"]

log = logging.getLogger(__name__)

_FIX = "choose an empty or new --cache (prep never deletes what it did not write)"


def claim(layout: CacheLayout, *, source: str, manifest: Manifest, overwrite: bool) -> locks.CacheUse:
    """Makes the cache at ``layout`` the one of ``source`` (``manifest``); returns this process's use of it.

    Raises:
        PrepError: the root is a file, holds files prep did not write, caches another
            materialization (without ``overwrite``), or another process uses the cache of
            another materialization (with ``overwrite``; naming it).
    """
    root, fingerprint = layout.root, manifest.fingerprint
    if os.path.exists(root) and not os.path.isdir(root):
        raise PrepError(f"--cache {root} is a file, not a directory: {_FIX}")
    os.makedirs(root, exist_ok=True)
    with locks.exclusive(root):  # processes starting on one directory: one looks and claims at a time
        read_marker(layout)
        os.makedirs(layout.locks, exist_ok=True)
    use = locks.CacheUse(layout, CACHE_JOB)
    try:
        replacing = overwrite and use.try_exclusive()
        if not replacing:
            use.share()
        with locks.exclusive(root):
            old = read_marker(layout)
            if old is not None and old.fingerprint != fingerprint:
                _replace(layout, old, source, fingerprint, overwrite, replacing, use)
            if old is None or old.fingerprint != fingerprint:
                write_cache_marker(root, CacheMarker.now(source=source, fingerprint=fingerprint))
            _sweep(layout, use)
            manifest_path = os.path.join(root, MANIFEST)
            if not os.path.exists(manifest_path) or storage.read_json(manifest_path) != manifest.to_json():
                storage.write_json_atomic(manifest_path, manifest.to_json())
        if replacing:
            use.share()  # let the others in; the marker is read again: another run may have replaced it meanwhile
            with locks.exclusive(root):
                now = read_marker(layout)
            if now is None or now.fingerprint != fingerprint:
                raise PrepError(f"cache {root} was replaced by another run meanwhile (now materialization "
                                f"{now.fingerprint if now else None}): use another cache directory")
    except BaseException:
        use.release()
        raise
    return use


def read_marker(layout: CacheLayout) -> CacheMarker | None:
    """The cache's marker; None for an empty folder. Raises for a folder that is not a prep cache."""
    path = os.path.join(layout.root, CACHE_MARKER)
    if not os.path.exists(path):
        if set(os.listdir(layout.root)) - {os.path.basename(layout.locks)}:
            raise PrepError(f"--cache {layout.root} is not empty and is not a prep prewarm cache (no {CACHE_MARKER}): {_FIX}")
        return None
    try:
        return CacheMarker.from_json(read_json_file(path, None, _FIX), path)
    except PrepError as exc:
        raise PrepError(f"{exc}: {_FIX}") from None


def _replace(layout: CacheLayout, old: CacheMarker, source: str, fingerprint: str, overwrite: bool, replacing: bool,
             use: locks.CacheUse) -> None:
    """Removes the cache's own files of another materialization, when allowed (the caller holds the directory lock)."""
    root = layout.root
    held = f"cache {root} holds materialization {old.fingerprint} of {old.source}, not {fingerprint} of {source}"
    if not overwrite:
        raise PrepError(f"{held}: use another cache directory, or replace it with "
                        f"`prep prewarm {source} --cache {root} --overwrite`")
    if not replacing:
        others = use.others()
        who = ", ".join(h.describe() for h in others[:3]) or "another process"
        raise PrepError(f"{held}, and it is in use by {who}: wait for it to finish or use another cache directory")
    log.warning("replacing the cache %s (materialization %s): removing only the files the cache wrote", root, old.fingerprint)
    remove_owned(root, layout.owned())


def _sweep(layout: CacheLayout, use: locks.CacheUse) -> None:
    """Removes what killed or failed runs left: records of processes that are gone, and temp files of fetches
    nobody runs now (a split's leftovers go only under its lock)."""
    use.sweep()
    for name in (MANIFEST, CACHE_MARKER):  # written under the directory lock, which the caller holds
        for part in glob.glob(os.path.join(glob.escape(layout.root), name + ".tmp-*")):
            remove_tree(part)
    for key in layout.leftover_keys():
        fd = locks.try_exclusive(layout.lock(key))
        if fd is not None:
            try:
                for part in layout.leftovers(key):
                    remove_tree(part)
            finally:
                os.close(fd)
