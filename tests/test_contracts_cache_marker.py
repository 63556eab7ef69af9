"""The cache marker ``_prep_cache.json``: what the cache writes reads back, and anything else is one error naming the file."""

from __future__ import annotations

import json

import pytest

from prep.contracts.cache_marker import CacheMarker
from prep.errors import PrepError

GOOD = {"written_by": "prep", "prep_version": "0.1.0", "job": "prep prewarm", "claimed": "2026-12-01T16:05:03+00:00",
        "source": "/abs/out", "fingerprint": "5a396cc6ece2d6c3"}


def test_round_trip():
    marker = CacheMarker.now(source="s3://b/out", fingerprint="5a396cc6ece2d6c3")
    assert CacheMarker.from_json(json.loads(json.dumps(marker.to_json())), "m") == marker
    assert CacheMarker.from_json(GOOD, "m").to_json() == GOOD


@pytest.mark.parametrize("change, says", [
    ({"fingerprint": "x5a396cc6ece2d6c3"}, "fingerprint='x5a396cc6ece2d6c3' must be 16 hex digits"),
    ({"source": ""}, "source='' must be a non-empty string"),
    ({"claimed": 3}, "claimed=3 must be a non-empty string"),
    ({"job": "prep pretokenize"}, "job='prep pretokenize' must be"),
    ({"written_by": "me"}, "written_by='me'"),
    ({"extra": 1}, r"unknown keys \['extra'\]"),
])
def test_a_bad_key_is_one_error_naming_the_file(change, says):
    with pytest.raises(PrepError, match=r"^c/_prep_cache.json: cache marker: .*" + says):
        CacheMarker.from_json({**GOOD, **change}, "c/_prep_cache.json")
    missing = {k: v for k, v in GOOD.items() if k != "source"}
    with pytest.raises(PrepError, match=r"missing keys \['source'\]"):
        CacheMarker.from_json(missing, "c/_prep_cache.json")
    with pytest.raises(PrepError, match="must be a JSON object, not list"):
        CacheMarker.from_json([], "c/_prep_cache.json")
