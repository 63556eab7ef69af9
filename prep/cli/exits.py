"""How every ``prep`` command ends: exit codes, one-line errors, flag names in messages.

The one place that turns an error into what the user sees. Codes:

- 0: OK.
- 1: ``prep verify`` found a mismatch (the report is on stdout, a one-line summary on stderr), or a
  prepare job rejected more rows than ``max_reject_fraction`` allows, or all of them.
- 2: unusable input or a usage error: one line on stderr naming the file or flag and the fix.
- 3: an unexpected error (a bug in prep): one line; ``prep -v`` shows the traceback.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import select
import sys
import traceback
from typing import NoReturn, Sequence

from prep.errors import PrepError, TooManyRejects, one_line

__all__ = ["OK", "MISMATCH", "UNUSABLE", "BUG", "OneLineParser", "at_least", "names", "epilog", "stdout_closed", "end_quietly", "fail"]

OK, MISMATCH, UNUSABLE, BUG = 0, 1, 2, 3


def epilog(*, mismatch: bool = False, rejects: bool = False) -> str:
    """The exit-code paragraph of ``prep <cmd> --help``."""
    codes = ["0 OK"]
    if mismatch:
        codes.append("1 verification mismatch (report on stdout, one-line summary on stderr)")
    if rejects:
        codes.append("1 too many rows rejected (over --max-reject-fraction, or all of them; one line on stderr)")
    codes += ["2 unusable input or usage error (one line on stderr naming the file or flag)",
              "3 unexpected error, a bug in prep (rerun with `prep -v` for the traceback)"]
    return "exit status: " + "; ".join(codes) + "."


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}; see `{self.prog} --help`", file=sys.stderr)
        sys.exit(UNUSABLE)


def at_least(minimum: int):
    """An argparse ``type``: an integer >= ``minimum`` (so a bad value names its flag)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be >= {minimum}")
        return value

    return parse


def names(value: str) -> list[str]:
    """An argparse ``type``: comma-separated names, blanks dropped.

    >>> names("id, source,")
    ['id', 'source']
    """
    return [v.strip() for v in value.split(",") if v.strip()]


def _given_flags(parser: argparse.ArgumentParser, argv: Sequence[str]) -> dict[str, str]:
    """{parameter name: the flag the user typed} for the options present in ``argv``."""
    given = {}
    for action in parser._actions:
        for flag in action.option_strings:
            if flag.startswith("--") and any(a == flag or a.startswith(flag + "=") for a in argv):
                given[action.dest] = flag
    return given


def _with_flags(message: str, flags: dict[str, str]) -> str:
    """``epochs=0 must be >= 1`` -> ``--epochs 0 must be >= 1`` for each parameter the user gave as a flag."""
    for dest, flag in flags.items():
        message = re.sub(rf"(?<![\w.-]){re.escape(dest)}=", f"{flag} ", message)
    return message


def stdout_closed() -> bool:
    """True when stdout is a pipe whose reader has gone (``prep read ... | head -1`` after ``head`` exits)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):  # stdout replaced (tests) or closed by the program
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def end_quietly() -> int:
    """The reader of stdout took what it wanted and left: like ``cat`` or ``ls``, end without a word, exit 0.
    stdout goes to /dev/null first, so the interpreter's last flush of what is still buffered cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return OK


def fail(exc: BaseException, *, command: str, parser: argparse.ArgumentParser, argv: Sequence[str], verbose: bool) -> int:
    """Prints ``exc`` as one line on stderr and returns its exit code (0 for a closed stdout, see :func:`end_quietly`)."""
    if isinstance(exc, BrokenPipeError) and stdout_closed():
        return end_quietly()
    if isinstance(exc, PrepError):
        code, text = MISMATCH if isinstance(exc, TooManyRejects) else UNUSABLE, one_line(exc, limit=1000)
    elif isinstance(exc, (OSError, ValueError)):  # Lance, Arrow, JSON and file errors about the input
        code, text = UNUSABLE, f"{type(exc).__name__}: {one_line(exc)}"
    else:
        code, text = BUG, f"unexpected {type(exc).__name__}: {one_line(exc)} (a bug in prep: rerun with `prep -v` for the traceback)"
    if verbose:
        traceback.print_exc()
    print(f"prep {command}: error: {_with_flags(text, _given_flags(parser, argv))}", file=sys.stderr)
    return code
