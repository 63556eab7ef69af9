"""Test-only fault injection: raise a chosen exception, or die, at a named stage for a named item.

Nothing here runs unless a test sets :data:`ENV`; on clean runs :func:`maybe_raise`
is one check of an empty tuple. The value is a ``;``-separated list of
``stage:action:needle`` entries:

- ``stage``: where prep calls :func:`maybe_raise` (text rows: ``parse``, ``format``,
  ``template``, ``tokenize``; the driver's commit points: ``commit``, named
  ``claimed``, ``rejects``, ``table``, ``cleaned``).
- ``action``: the name of a built-in exception type (``TypeError``, ``RecursionError``...),
  raised with a message naming the stage and item; or ``kill``, which sends SIGKILL to
  the process, as a kill at that point would.
- ``needle``: the entry fires for every item whose name contains it (a row's raw text,
  a file's path, a commit point's name).

Example: ``PREP_TEST_RAISE="tokenize:TypeError:What is 7 + 5;commit:kill:rejects"``.

The driver reads the variable once per job (:func:`from_env`), arms itself and ships
the value inside the chunk worker (:class:`Armed`), because a worker process may have
started before the test set the variable.
"""

from __future__ import annotations

import builtins
import os
import signal
from dataclasses import dataclass
from typing import Any

__all__ = ["ENV", "Fault", "parse", "arm", "active", "from_env", "maybe_raise", "make_exception", "Armed"]

ENV = "PREP_TEST_RAISE"


@dataclass(frozen=True)
class Fault:
    """One entry of :data:`ENV`: at ``stage``, for items whose name contains ``needle``, do ``action``."""

    stage: str
    action: str
    needle: str


_armed: tuple[Fault, ...] = ()


def parse(spec: str | None) -> tuple[Fault, ...]:
    """The faults ``spec`` names; a typo is an error, not a silently inert test.

    >>> parse("parse:ValueError:row 7;commit:kill:rejects")
    (Fault(stage='parse', action='ValueError', needle='row 7'), Fault(stage='commit', action='kill', needle='rejects'))
    """
    faults = []
    for entry in (spec or "").split(";"):
        if not entry.strip():
            continue
        stage, action, needle = (entry.split(":", 2) + ["", ""])[:3]
        if action != "kill" and not isinstance(getattr(builtins, action, None), type):
            raise ValueError(f"{ENV}: {entry!r}: {action!r} is neither 'kill' nor a built-in exception type")
        if not stage or not needle:
            raise ValueError(f"{ENV}: {entry!r}: expected stage:action:needle")
        faults.append(Fault(stage, action, needle))
    return tuple(faults)


def arm(spec: str | None) -> None:
    """Makes ``spec`` the faults of this process (None or "" disarms)."""
    global _armed
    _armed = parse(spec)


def active() -> bool:
    """True when any fault is armed: callers build an item's name only then."""
    return bool(_armed)


def from_env() -> str | None:
    """The value of :data:`ENV` (tests only)."""
    return os.environ.get(ENV)


def make_exception(name: str, message: str) -> BaseException:
    """An instance of the built-in exception type ``name``, whatever its constructor takes."""
    kind = getattr(builtins, name)
    if issubclass(kind, UnicodeDecodeError):
        return kind("utf-8", b"\xff", 0, 1, message)
    if issubclass(kind, UnicodeEncodeError):
        return kind("utf-8", "\udcff", 0, 1, message)
    if issubclass(kind, UnicodeTranslateError):
        return kind("\udcff", 0, 1, message)
    if issubclass(kind, BaseExceptionGroup):
        return kind(message, [ValueError(message)])
    return kind(message)


def maybe_raise(stage: str, name: str) -> None:
    """Raises (or dies) if a fault names ``stage`` and ``name`` contains its needle."""
    if not _armed:
        return
    for fault in _armed:
        if fault.stage == stage and fault.needle in name:
            if fault.action == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise make_exception(fault.action, f"injected at {stage} for {name[:80]!r}")


@dataclass(frozen=True)
class Armed:
    """A chunk worker that arms ``spec`` in whatever process runs it (every call: a
    sandbox serves many jobs, and each job's value, or its absence, must hold)."""

    worker: Any
    spec: str | None

    def __call__(self, chunk: Any, *args: Any) -> Any:
        arm(self.spec)
        return self.worker(chunk, *args)
