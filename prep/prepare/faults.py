"""Test-only exception injection: make one stage raise for one named item.

``PREP_TEST_RAISE=stage:key-substring:ExceptionName`` (comma-separated for several)
makes :func:`maybe_raise` raise that built-in exception when ``stage`` matches and the
item's key contains the substring, e.g. ``decode:ants/0013035.jpg:TypeError``. Tests use
it to check that any exception raised for one item, whatever its type, costs that item
alone. Unset (always, outside tests) a call costs one environment lookup. The prepare
driver ships the variable with each chunk to the sandbox processes
(:mod:`prep.prepare.isolation`), which outlive a test's environment.
"""

from __future__ import annotations

import builtins
import functools
import os

__all__ = ["RAISE_ENV", "maybe_raise"]

RAISE_ENV = "PREP_TEST_RAISE"


def maybe_raise(stage: str, key: str) -> None:
    """Raises the exception ``PREP_TEST_RAISE`` names for ``stage`` and ``key``, if any."""
    spec = os.environ.get(RAISE_ENV)
    if not spec:
        return
    for want_stage, needle, exc_type in _parse(spec):
        if want_stage == stage and needle in key:
            raise _build(exc_type, f"injected by {RAISE_ENV} at {stage} for {key}")


@functools.lru_cache(maxsize=16)
def _parse(spec: str) -> tuple[tuple[str, str, type[BaseException]], ...]:
    rules = []
    for rule in filter(None, (r.strip() for r in spec.split(","))):
        stage, _, rest = rule.partition(":")
        needle, _, name = rest.rpartition(":")
        exc_type = getattr(builtins, name, None)
        if not (stage and needle and isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
            raise ValueError(f"{RAISE_ENV}: {rule!r} is not stage:key-substring:BuiltinExceptionName")
        rules.append((stage, needle, exc_type))
    return tuple(rules)


def _build(exc_type: type[BaseException], message: str) -> BaseException:
    """An instance of ``exc_type``, for the few built-ins whose constructor wants more than a message."""
    if issubclass(exc_type, UnicodeDecodeError):
        return exc_type("utf-8", b"\xff", 0, 1, message)
    if issubclass(exc_type, UnicodeEncodeError):
        return exc_type("utf-8", "\udc80", 0, 1, message)
    if issubclass(exc_type, UnicodeTranslateError):
        return exc_type("\udc80", 0, 1, message)
    if issubclass(exc_type, BaseExceptionGroup):  # a group of plain Exceptions is an ExceptionGroup
        return exc_type(message, [ValueError(message) if issubclass(exc_type, Exception) else BaseException(message)])
    return exc_type(message)
