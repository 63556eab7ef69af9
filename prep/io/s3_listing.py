"""s3fs whose directory listings retry as a whole under prep's :class:`~prep.io.retry.RetryPolicy`.

s3fs before 2026.9.0 sends a listing's pages through botocore's paginator, outside its own
retry loop (s3fs #982): one throttled or dropped page failed ``ls``, ``find``, ``glob`` and
``walk``. Every one of them lists through ``_lsdir``, which collects all pages before it
caches or returns anything, so retrying that call whole is safe; with s3fs 2026.9.0, which
retries each page itself, this loop only acts once those retries are spent.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import s3fs

from prep.io.retry import RetryPolicy, call_async

__all__ = ["S3ListingRetries"]


class S3ListingRetries(s3fs.S3FileSystem):
    """:class:`s3fs.S3FileSystem` with listings retried; ``retries`` (as s3fs's) bounds the tries.

    :func:`prep.io.storage.resolve` sets ``retry_policy`` (the backoff) and ``retries`` on each instance.
    """

    retry_policy: RetryPolicy = RetryPolicy()

    async def _lsdir(self, *args: Any, **kwargs: Any) -> Any:
        listing = super()._lsdir
        policy = dataclasses.replace(self.retry_policy, max_attempts=max(1, int(self.retries)))
        return await call_async(lambda: listing(*args, **kwargs), policy=policy)
