"""Rejected inputs: every row or file that could not be prepared, with the reason.

Nothing is dropped silently: a worker that cannot use an input records a
:class:`Reject`, and the job writes them to the rejects table beside the output.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

__all__ = ["Reject", "REJECTS_SCHEMA", "rejects_table", "RAW_PREFIX_CHARS"]

RAW_PREFIX_CHARS = 200

REJECTS_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string()),
        pa.field("position", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("raw", pa.string()),
    ]
)


@dataclass(frozen=True, slots=True)
class Reject:
    """One input that was not prepared.

    Args:
        source: the file's URI.
        position: where in it, e.g. ``line 17``, ``row 3``, ``byte 1024``, ``file``.
        reason: what was wrong, in words a user can act on.
        raw: a prefix of the offending input (may be empty).
    """

    source: str
    position: str
    reason: str
    raw: str = ""

    @property
    def is_row(self) -> bool:
        """Row-level rejects count against rows read; file-level ones (``position == "file"``) do not."""
        return self.position != "file"


def rejects_table(rejects: list[Reject]) -> pa.Table:
    return pa.table(
        {
            "source": [r.source for r in rejects],
            "position": [r.position for r in rejects],
            "reason": [r.reason for r in rejects],
            "raw": [r.raw[:RAW_PREFIX_CHARS] for r in rejects],
        },
        schema=REJECTS_SCHEMA,
    )
