"""The one exception type users are meant to read, and the helper that makes any error one line."""

from __future__ import annotations

import re

__all__ = ["PrepError", "TooManyRejects", "one_line", "described"]

# Lance (Rust) appends where in its own build an error was raised: ", /home/runner/.../local.rs:273:40"
_RUST_SOURCE = re.compile(r",?\s*\(?[^\s,()]*\.rs:\d+(?::\d+)?\)?")


class PrepError(Exception):
    """A problem the user can act on: bad config, bad input, a missing path.

    The message names the file, key or row and says what to do; the CLI prints it
    as a single line instead of a traceback.
    """


class TooManyRejects(PrepError):
    """A prepare job rejected more rows than its budget (``max_reject_fraction``) allows, or all
    of them: the input was usable, the result is not (exit status 1, not 2)."""


def one_line(error: BaseException | str, limit: int = 400) -> str:
    """The first non-empty line of an error, without Lance's internal source paths.

    Lance and Arrow errors carry multi-line text and paths into the Rust sources
    Lance was built from, which mean nothing to a user; every message prep prints
    or wraps goes through here.

    >>> one_line("Not found: /d/x.lance, /home/runner/work/lance/rust/lance-io/src/local.rs:273:40\\nmore")
    'Not found: /d/x.lance'
    """
    text = str(error)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    first = _RUST_SOURCE.sub("", first).strip()
    if not first and isinstance(error, BaseException):
        first = type(error).__name__
    return first if len(first) <= limit else first[: limit - 3] + "..."


def described(error: BaseException) -> str:
    """``Type: message`` in one line (``Type`` alone when there is no message): how a reject names an exception.

    >>> described(KeyError("width")), described(TypeError())
    ("KeyError: 'width'", 'TypeError')
    """
    message = one_line(str(error))
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
