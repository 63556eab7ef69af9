"""docs/cli.md, generated from the CLI itself: ``python -m prep.cli.reference > docs/cli.md``.

The reference is every command's ``--help`` at a fixed width, so it cannot say
anything the CLI does not; ``tests/test_cli_reference.py`` fails when the file drifts.
"""

from __future__ import annotations

import argparse
import os
import sys

from prep.cli import build_parser, commands

__all__ = ["markdown", "WIDTH"]

WIDTH = 100


def _help(parser: argparse.ArgumentParser) -> str:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)  # argparse wraps to the terminal width: fix it so the file is stable
    try:
        return parser.format_help().rstrip()
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def markdown() -> str:
    """The CLI reference: ``prep --help``, then each command's ``--help``, in the order ``prep --help`` lists them."""
    parser = build_parser()
    parts = ["# CLI reference", "",
             "Generated from the CLI by `python -m prep.cli.reference > docs/cli.md`; a test fails when it drifts.", "",
             "```text", _help(parser), "```"]
    for name, command in commands(parser).items():
        parts += ["", f"## prep {name}", "", "```text", _help(command), "```"]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
