"""Reading the small JSON files prep writes beside its outputs (manifests, job markers, done records)."""

from __future__ import annotations

import json
from typing import Any

from prep.io import storage
from prep.errors import PrepError, one_line

__all__ = ["read_json_file"]


def read_json_file(uri: str, s3: storage.S3Options | None, fix: str) -> Any:
    """Parses a JSON file; a broken one is a one-line PrepError naming it, the line and ``fix``."""
    fs, path = storage.filesystem(uri, s3)
    try:
        with fs.open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise PrepError(f"{uri} cannot be read ({one_line(exc)}): {fix}") from None
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise PrepError(f"{uri} is not valid JSON (not UTF-8 text): {fix}") from None
    except json.JSONDecodeError as exc:
        raise PrepError(f"{uri} is not valid JSON (line {exc.lineno}: {exc.msg}): {fix}") from None
