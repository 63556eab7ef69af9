"""prep's retry policy: what is retried, how long it waits, how concurrency adapts."""

from __future__ import annotations

import random

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from prep.errors import PrepError
from prep.io.retry import Aimd, RetryCounter, RetryPolicy, call, retryable, throttled


def client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")


@pytest.mark.parametrize("exc, expected", [
    (client_error("SlowDown", 503), True),
    (client_error("InternalError", 500), True),
    (ConnectionResetError(), True),
    (ReadTimeoutError(endpoint_url="http://x"), True),
    (OSError(104, "Connection reset by peer"), True),
    (client_error("AccessDenied", 403), False),
    (client_error("NoSuchKey", 404), False),
    (FileNotFoundError("s3://b/k"), False),
    (PermissionError("denied"), False),
    (ValueError("row 503 of 500 is bad"), False),  # digits in a message are not a status
    (PrepError("prep's own"), False),
])
def test_retryable(exc, expected):
    assert retryable(exc) is expected


def test_a_wrapped_error_is_judged_by_its_cause():
    try:
        try:
            raise client_error("SlowDown", 503)
        except ClientError as inner:
            raise OSError("s3fs wrapped it") from inner
    except OSError as outer:
        assert retryable(outer) and throttled(outer)


def test_backoff_is_jittered_exponential_and_capped():
    policy = RetryPolicy(base_s=0.1, cap_s=1.0)
    rng = random.Random(0)
    waits = [[policy.backoff(n, rng) for _ in range(200)] for n in range(8)]
    assert all(0 <= w <= min(1.0, 0.1 * 2 ** n) for n, ws in enumerate(waits) for w in ws)
    assert max(waits[7]) > 0.9 and max(waits[0]) <= 0.1 and len(set(waits[3])) > 150


def test_call_retries_then_names_what_failed():
    attempts, slept, counter = [], [], RetryCounter()

    def flaky():
        attempts.append(1)
        if len(attempts) < 3:
            raise client_error("SlowDown", 503)
        return "ok"

    assert call(flaky, what="cannot fetch s3://b/k", counter=counter, sleep=slept.append) == "ok"
    assert len(attempts) == 3 and len(slept) == 2 and counter.retries == 2 and counter.throttled == 2

    def dead():
        raise ConnectionResetError("reset")

    with pytest.raises(PrepError, match=r"cannot fetch s3://b/x: still failing after 4 attempts \(reset\)"):
        call(dead, what="cannot fetch s3://b/x", policy=RetryPolicy(max_attempts=4), sleep=lambda s: None)
    with pytest.raises(PrepError, match="cannot fetch s3://b/y: denied"):
        call(lambda: (_ for _ in ()).throw(PermissionError("denied")), what="cannot fetch s3://b/y", sleep=slept.append)


def test_aimd_halves_on_throttling_and_grows_back():
    limiter = Aimd(16, window=4)
    limiter.throttled()
    limiter.throttled()
    assert limiter.limit == 4 and limiter.decreases == 2
    for _ in range(4 * 3):
        limiter.succeeded()
    assert limiter.limit == 7
    for _ in range(10):
        limiter.throttled()
    assert limiter.limit == 1
