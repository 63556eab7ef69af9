"""Progress bars for long operations (prepare chunks, materialized splits, verify, prewarm bytes).

One small wrapper over tqdm so every command's bar looks alike and obeys the same
rule: drawn on stderr only when stderr is a terminal and the user did not pass
``--quiet`` (see :mod:`prep.runtime.logs`); otherwise every call is a cheap no-op, so
logs, pipes and CI output stay clean.
"""

from __future__ import annotations

import sys
from typing import Any

from prep.runtime import logs

__all__ = ["Bar", "enabled"]


def enabled() -> bool:
    """Whether bars are drawn: stderr is a terminal and ``--quiet`` was not given."""
    return not logs.quiet() and sys.stderr.isatty()


class Bar:
    """A progress bar over ``total`` units (ETA and rate from tqdm); a no-op when :func:`enabled` is False.

    Args:
        total: units of work (None: unknown, a counter without ETA).
        desc: what is being done, e.g. ``"prepare chunks"``.
        unit: the unit's name (default ``"it"``); ``"B"`` scales to kB/MB/GB per second.
        show: False keeps this bar off whatever :func:`enabled` says (e.g. when the command's own
            output already shows progress on the terminal).

    Example:
        >>> with Bar(3, "chunks") as bar:
        ...     for _ in range(3):
        ...         bar.update(1, rows=10)
        >>> bar.done
        3
    """

    def __init__(self, total: int | None, desc: str, *, unit: str = "it", show: bool = True) -> None:
        self.done = 0
        self._bar: Any = None
        if show and enabled():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", unit_divisor=1024 if unit == "B" else 1000,
                             file=sys.stderr, dynamic_ncols=True, leave=True)

    def update(self, n: int = 1, **postfix: Any) -> None:
        """Advances by ``n`` units; ``postfix`` (e.g. ``rows=1200``) is shown after the bar."""
        self.done += n
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix_str(", ".join(f"{k}={_short(v)}" for k, v in postfix.items()), refresh=False)
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Bar":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _short(value: Any) -> str:
    """``1234567`` -> ``1.23M``; other values as they are."""
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if abs(value) >= size:
                return f"{value / size:.2f}{suffix}"
    return str(value)
