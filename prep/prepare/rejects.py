"""Rejected inputs: every row or file that could not be prepared, with the reason.

Nothing is dropped silently: a worker that cannot use an input records a
:class:`Reject`, and the job writes them to the rejects table beside the output.
Rejects are also a budget: a job that rejects more than ``max_reject_fraction`` of
the rows it read, or every row, fails (:func:`check_budget`) instead of writing a
table that lacks much of its data.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from prep.errors import TooManyRejects

__all__ = ["Reject", "REJECTS_SCHEMA", "rejects_table", "RAW_PREFIX_CHARS", "reason_group", "check_budget"]

RAW_PREFIX_CHARS = 200
TOP_REASONS = 3

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


def _utf8(text: str) -> str:
    """``text`` as Arrow can store it: lone surrogates (a JSON ``"\\ud800"``) written as escapes.

    >>> _utf8("What is \\ud800?")
    'What is \\\\ud800?'
    """
    try:
        text.encode()
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()


def rejects_table(rejects: list[Reject]) -> pa.Table:
    return pa.table(
        {
            "source": [_utf8(r.source) for r in rejects],
            "position": [_utf8(r.position) for r in rejects],
            "reason": [_utf8(r.reason) for r in rejects],
            "raw": [_utf8(r.raw[:RAW_PREFIX_CHARS]) for r in rejects],
        },
        schema=REJECTS_SCHEMA,
    )


def reason_group(reason: str) -> str:
    """A reject reason with its numbers and quoted values blanked, so alike rejects group together.

    >>> reason_group("1234 tokens > max_length 1024")
    'N tokens > max_length N'
    >>> reason_group("missing field 'answer'")
    "missing field '…'"
    >>> reason_group("invalid UTF-8 at byte 17 of the line")
    'invalid UTF-8 at byte N of the line'
    """
    return re.sub(r"(?<![\w-])\d+", "N", re.sub(r"'[^']*'", "'…'", reason))


def check_budget(rows_read: int, rows_rejected: int, reasons: Callable[[], list[str]], max_fraction: float, *, output: str, rejects: str) -> None:
    """Fails a job that rejected more than ``max_fraction`` of its rows, or all of them (or read none).

    Args:
        rows_read, rows_rejected: the job's reconciled counts.
        reasons: reads the row-level reject reasons (only on failure; grouped by :func:`reason_group`).
        max_fraction: the job's ``max_reject_fraction``.
        output, rejects: the table (not written) and the rejects table (kept, to look at).

    Raises:
        TooManyRejects: one line with the counts, the top reasons and what to do.
    """
    if rows_read and rows_rejected < rows_read and rows_rejected <= max_fraction * rows_read:
        return
    if not rows_read:
        why = "no rows were read (every input file is empty or was rejected whole)"
    else:
        top = Counter(map(reason_group, reasons())).most_common(TOP_REASONS)
        shown = "; ".join(f"{n:,} x {reason!r}" for reason, n in top)
        limit = "every row" if rows_rejected == rows_read else f"more than max_reject_fraction={max_fraction:g}"
        why = f"{rows_rejected:,} of {rows_read:,} rows rejected ({rows_rejected / rows_read:.1%}), {limit}: {shown}"
    raise TooManyRejects(f"{why}; {output} was not written, the rejects are in {rejects} (`prep inspect {rejects}`); "
                         "fix the input or the config, or raise max_reject_fraction (--max-reject-fraction), and rerun")
