"""What ``prep verify`` checked and found: one report type for single tables and mixtures."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Report", "first_difference"]

_SPLIT = re.compile(r"^epoch \d+ split \d+(?=:)")  # how a problem of one split starts


@dataclass
class Report:
    """What :func:`prep.materialize.verify.verify` checked and found (``ok`` is False on any problem)."""

    path: str
    fingerprint: str = ""
    epochs: int = 0
    splits: int = 0
    rows: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    repair: str = ""  # the command that rewrites the damaged splits (:func:`prep.contracts.materialized.rerun_command`)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def damaged_splits(self) -> list[str]:
        """``epoch E split S`` of each split a problem names, in the order found: what a rerun rewrites."""
        return list(dict.fromkeys(m.group(0) for p in self.problems if (m := _SPLIT.match(p))))

    def repair_line(self) -> str | None:
        """What to run to rewrite the damaged splits; None when no split is damaged."""
        damaged = self.damaged_splits
        if not damaged or not self.repair:
            return None
        more = f" and {len(damaged) - 3} more" if len(damaged) > 3 else ""
        return f"to rewrite the damaged splits ({', '.join(damaged[:3])}{more}), rerun: {self.repair}"

    def lines(self) -> list[str]:
        head = "OK" if self.ok else f"FAILED ({len(self.problems)} problems)"
        out = [
            f"{self.path}: {head}",
            f"  fingerprint {self.fingerprint}: {self.epochs} epochs x {self.splits} splits, {self.rows:,} rows checked",
        ]
        out += [f"  note: {n}" for n in self.notes]
        out += [f"  problem: {p}" for p in self.problems[:50]]
        if len(self.problems) > 50:
            out.append(f"  ... and {len(self.problems) - 50} more")
        repair = self.repair_line()
        if repair:
            out.append(f"  repair: {repair}")
        return out


def first_difference(want: np.ndarray, got: np.ndarray) -> str | None:
    """Where ``got`` first departs from ``want`` (None when they are equal), for a problem line.

    >>> first_difference(np.arange(8), np.arange(7))
    'first at row 7: the plan has 8 rows, the split 7'
    >>> first_difference(np.array([1, 2, 3]), np.array([1, 5, 3]))
    'first at row 1: the plan has 2, the split 5 (1 rows differ)'
    """
    common = min(len(want), len(got))
    differ = np.flatnonzero(want[:common] != got[:common])
    if len(differ):
        at = int(differ[0])
        return f"first at row {at}: the plan has {want[at]}, the split {got[at]} ({len(differ)} rows differ)"
    if len(want) != len(got):
        return f"first at row {common}: the plan has {len(want)} rows, the split {len(got)}"
    return None
