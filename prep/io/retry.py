"""prep's own retry policy for object storage: which errors are worth another try, and how long to wait.

One :class:`RetryPolicy` configures every layer that talks to a remote: botocore
(``standard`` retry mode, timeouts), s3fs (its request retries) and Lance's object
store (``client_max_retries``, ``request_timeout``...; see :mod:`prep.io.storage`), and
prep's own copies (:func:`call`, the reader cache's fetch stage) and S3 listings
(:func:`call_async`, :mod:`prep.io.s3_listing`) retry with exponential backoff, full jitter
and a cap. :class:`Aimd` bounds how many requests are in flight
and halves that under throttling (additive increase, multiplicative decrease), so a
throttled bucket sees fewer requests instead of more retries.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, TypeVar

from prep.errors import PrepError, one_line

__all__ = ["RetryPolicy", "retryable", "throttled", "call", "call_async", "Aimd", "RetryCounter"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# S3 error codes and HTTP statuses that a later attempt can get past.
# Numbers only count as botocore's HTTP status, never as digits in a message.
_THROTTLE = ("SlowDown", "Throttling", "RequestLimitExceeded", "TooManyRequests", "Too Many Requests")
_THROTTLE_STATUS = {429, 503}
_TRANSIENT = ("InternalError", "ServiceUnavailable", "RequestTimeout", "RequestTimeTooSkewed",
              "Service Unavailable", "Internal Server Error", "Bad Gateway", "Gateway Timeout")
_TRANSIENT_STATUS = {500, 502, 504}
# Exception class names (botocore, aiohttp, urllib3, http.client) of dropped, stalled or short transfers.
_TRANSIENT_TYPES = frozenset({
    "EndpointConnectionError", "ConnectionClosedError", "ReadTimeoutError", "ConnectTimeoutError",
    "IncompleteReadError", "ResponseStreamingError", "ClientPayloadError", "ServerDisconnectedError",
    "ClientOSError", "ServerTimeoutError", "IncompleteRead", "ProtocolError", "RemoteDisconnected",
    "ContentLengthError", "TransferEncodingError", "ChunkedEncodingError",
})
_TRANSIENT_ERRNOS = {errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.EPIPE, errno.ETIMEDOUT}


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How prep and the storage clients under it retry remote requests.

    Args:
        max_attempts: tries of one request, the first included (default 8).
        base_s: the first backoff; each retry doubles it (default 0.2 s).
        cap_s: the longest single backoff (default 10 s).
        connect_timeout_s: connecting to the endpoint (default 10 s).
        read_timeout_s: a request that sends nothing for this long is dropped and retried (default 60 s).
        total_timeout_s: Lance's overall limit for one request's retries (default 180 s).
    """

    max_attempts: int = 8
    base_s: float = 0.2
    cap_s: float = 10.0
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0
    total_timeout_s: float = 180.0

    def backoff(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0-based): full jitter under ``base * 2**retry``, capped."""
        return (rng or random).uniform(0, min(self.cap_s, self.base_s * (2 ** retry)))


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    while exc is not None and exc not in out and len(out) < 16:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _status(exc: BaseException) -> int | None:
    """The HTTP status of a botocore ClientError (``exc.response``), else None."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return None


def _text(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    code = (response.get("Error") or {}).get("Code", "") if isinstance(response, dict) else ""
    return f"{code} {exc}"


def throttled(exc: BaseException) -> bool:
    """True when the store asked to slow down (503 SlowDown and kin)."""
    return any(_status(e) in _THROTTLE_STATUS or any(t in _text(e) for t in _THROTTLE) for e in _chain(exc))


def retryable(exc: BaseException) -> bool:
    """True for errors a later attempt can get past: throttling, 5xx, resets, timeouts, short bodies.

    Missing objects, denied access, bad requests and prep's own errors are final.
    """
    for e in _chain(exc):
        if isinstance(e, (PrepError, FileNotFoundError, PermissionError)):
            return False
        if type(e).__name__ in _TRANSIENT_TYPES or isinstance(e, (ConnectionError, TimeoutError)):
            return True
        if isinstance(e, OSError) and e.errno in _TRANSIENT_ERRNOS:
            return True
        if _status(e) in _THROTTLE_STATUS | _TRANSIENT_STATUS or any(t in _text(e) for t in _THROTTLE + _TRANSIENT):
            return True
    return False


class RetryCounter:
    """Retries seen by one component, thread-safe (shown in the reader's stats)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.retries = 0
        self.throttled = 0

    def add(self, exc: BaseException) -> None:
        with self._lock:
            self.retries += 1
            self.throttled += throttled(exc)


def _next_wait(exc: BaseException, attempt: int, policy: RetryPolicy, counter: RetryCounter | None = None,
               limiter: "Aimd | None" = None) -> float | None:
    """Seconds to wait before another try after ``exc`` failed try ``attempt`` (0-based); None: the error
    is final or the tries are spent."""
    if not retryable(exc):
        return None
    if limiter is not None and throttled(exc):
        limiter.throttled()
    if attempt + 1 == policy.max_attempts:
        return None
    if counter is not None:
        counter.add(exc)
    wait = policy.backoff(attempt)
    log.debug("retrying in %.2fs after %s", wait, one_line(exc))
    return wait


def call(fn: Callable[[], T], *, what: str, policy: RetryPolicy | None = None, counter: RetryCounter | None = None,
         limiter: "Aimd | None" = None, sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()``, retried under ``policy`` while it fails with a :func:`retryable` error.

    Raises:
        PrepError: naming ``what`` and the last error, once retries are spent or the error is final.
    """
    policy = policy or RetryPolicy()
    for attempt in range(policy.max_attempts):
        try:
            out = fn()
        except Exception as exc:  # classified below: final errors go straight to the caller
            wait = _next_wait(exc, attempt, policy, counter, limiter)
            if wait is None:
                if isinstance(exc, PrepError):
                    raise
                if retryable(exc):
                    raise PrepError(f"{what}: still failing after {policy.max_attempts} attempts "
                                    f"({one_line(exc, limit=300)})") from exc
                raise PrepError(f"{what}: {one_line(exc, limit=300)}") from exc
            sleep(wait)
        else:
            if limiter is not None:
                limiter.succeeded()
            return out
    raise AssertionError("unreachable")  # the loop returns or raises


async def call_async(fn: Callable[[], Awaitable[T]], *, policy: RetryPolicy) -> T:
    """``await fn()``, retried under ``policy`` while it fails with a :func:`retryable` error.

    Unlike :func:`call`, the last error is raised as it is: the callers are fsspec's own methods
    (``exists`` reads a ``FileNotFoundError`` as False), under prep's listing retries (:mod:`prep.io.s3_listing`).
    """
    for attempt in range(policy.max_attempts):
        try:
            return await fn()
        except Exception as exc:  # classified below: final errors go straight to the caller
            wait = _next_wait(exc, attempt, policy)
            if wait is None:
                raise
            await asyncio.sleep(wait)
    raise AssertionError("unreachable")  # the loop returns or raises


class Aimd:
    """A concurrency limit that grows by one per ``window`` successes and halves when throttled.

    ``with limiter:`` holds one slot; at most :attr:`limit` are held at once.

    Args:
        start: the first limit.
        low: the smallest limit (default 1).
        high: the largest limit.
        window: successes per increase (default: the current limit, i.e. about one round trip).
    """

    def __init__(self, start: int, *, low: int = 1, high: int | None = None, window: int | None = None) -> None:
        self.low, self.high = low, high or start
        self.limit = max(low, min(start, self.high))
        self._window = window
        self._ok = 0
        self._held = 0
        self._cond = threading.Condition()
        self.decreases = 0

    def __enter__(self) -> "Aimd":
        with self._cond:
            self._cond.wait_for(lambda: self._held < self.limit)
            self._held += 1
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._held -= 1
            self._cond.notify_all()

    def succeeded(self) -> None:
        with self._cond:
            self._ok += 1
            if self._ok >= (self._window or self.limit) and self.limit < self.high:
                self.limit += 1
                self._ok = 0
                self._cond.notify_all()

    def throttled(self) -> None:
        with self._cond:
            new = max(self.low, self.limit // 2)
            if new < self.limit:
                self.decreases += 1
            self.limit, self._ok = new, 0
