"""The memory budget of a materialize run (``--max-memory``) and how a run spends it.

A run's memory beyond its fixed base (the interpreter, pyarrow and Lance, and a few MiB of
reads and written batches per thread: measured in docs/materialize.md) is rows: rows held
to be taken into an epoch's order, rows read in one sequential read, rows taken into one
written batch. :class:`Budget` derives each
from the one number a user gives, so that the peak RSS of a run stays within
``max_memory`` plus that base at any table size: what does not fit is spilled
(:mod:`prep.materialize.rows.spill`). This module imports nothing heavy: the CLI parses
``--max-memory`` with it at start-up.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from prep.errors import PrepError

__all__ = ["Budget", "parse_size", "default_max_memory", "MIN_MEMORY"]

MIN_MEMORY = 1 << 20  # below 1 MiB a budget holds fewer rows than one written batch of long documents
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 10**3, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6, "mib": 1 << 20,
          "g": 1 << 30, "gb": 10**9, "gib": 1 << 30, "t": 1 << 40, "tb": 10**12, "tib": 1 << 40}
# What the rows in memory cost in RSS beyond their Arrow bytes: Lance's decode buffers of the read in
# flight, the copies a take makes, what the allocator keeps of freed blocks. Measured in
# docs/materialize.md ("Memory"); these shares keep the sum of the parts within the budget.
HOLD_SHARE = 3  # held rows: a third of the budget (held bytes cost ~1.3-2x in RSS while they are used)
READ_SHARE = 16  # one sequential read (decoded, then cut by split): a sixteenth, per thread that reads
WRITE_SHARE = 32  # one written batch (taken into order, then encoded by Lance): a thirty-second, per thread
# Reads and written batches never go below these: smaller ones cost more per row in Lance's per-call and
# per-batch work than they save (1 MiB budget, 32 KiB reads: 14x the CPU of the unbounded run). They are
# part of the fixed base, per thread, not of the budget (docs/materialize.md, "Memory").
MIN_READ_BYTES = 4 << 20
MIN_WRITE_BYTES = 1 << 20


def parse_size(text: str | int) -> int:
    """Bytes from ``512MiB``, ``8GiB``, ``4MiB``, ``1.5G`` or a plain number of bytes (``k``/``m``/``g``/``t``
    alone are binary, ``KB``/``MB``/``GB``/``TB`` decimal).

    >>> parse_size("4MiB"), parse_size("1.5g"), parse_size("2GB"), parse_size(1 << 20)
    (4194304, 1610612736, 2000000000, 1048576)

    Raises:
        PrepError: a size that does not parse, or one below 1 MiB.
    """
    if isinstance(text, bool):
        raise PrepError(f"max_memory={text!r} is not a size")
    if isinstance(text, int):
        value = text
    else:
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
        unit = m and _UNITS.get(m.group(2).lower())
        if not m or unit is None:
            raise PrepError(f"max_memory={text!r} is not a size: write e.g. 512MiB, 8GiB or a number of bytes")
        value = int(float(m.group(1)) * unit)
    if value < MIN_MEMORY:
        raise PrepError(f"max_memory={text!r} is below the smallest budget, 1MiB")
    return value


def default_max_memory() -> int:
    """A quarter of this machine's physical memory (4 GiB when it cannot be read): the default budget."""
    try:
        return max(MIN_MEMORY, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4)
    except (ValueError, OSError, AttributeError):
        return 4 << 30


@dataclass(frozen=True)
class Budget:
    """How ``max_memory`` bytes are spent by one holder (one process on a node): rows held, rows per
    sequential read, rows per written batch.

    >>> b = Budget(3 << 30)
    >>> b.hold_bytes >> 20, b.read_bytes(threads=1) >> 20, b.write_bytes(threads=2) >> 20, Budget(48 << 20).read_bytes(2) >> 20
    (1024, 192, 48, 4)
    """

    max_memory: int

    @property
    def hold_bytes(self) -> int:
        """Arrow bytes of rows one holder keeps in memory to take into each epoch's order."""
        return self.max_memory // HOLD_SHARE

    def read_bytes(self, threads: int) -> int:
        """Arrow bytes of one sequential read when ``threads`` read at once (:data:`MIN_READ_BYTES` at least)."""
        return max(MIN_READ_BYTES, self.max_memory // (READ_SHARE * max(1, threads)))

    def write_bytes(self, threads: int) -> int:
        """Arrow bytes of one batch taken into order and written, when ``threads`` write at once
        (:data:`MIN_WRITE_BYTES` at least)."""
        return max(MIN_WRITE_BYTES, self.max_memory // (WRITE_SHARE * max(1, threads)))

    def rows(self, nbytes: int, row_bytes: int, most: int) -> int:
        """Rows of ``row_bytes`` each in ``nbytes`` (one at least, ``most`` at most)."""
        return max(1, min(most, nbytes // max(1, row_bytes)))
