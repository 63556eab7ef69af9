"""``prep <command>``: one module per command, each with ``register(subparsers)``.

A command module adds its parser and sets ``func``; :func:`main` turns a
:class:`~prep.errors.PrepError` into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from prep.errors import PrepError

__all__ = ["main"]

_COMMANDS = (
    "pretokenize",
    "decode_images",
    "materialize_shuffle",
    "verify",
    "prewarm",
    "read",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prep", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS:
        importlib.import_module(f"prep.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except PrepError as exc:
        print(f"prep {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
