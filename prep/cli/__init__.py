"""``prep <command>``: one module per command, each with ``register(subparsers)``.

A command module adds its parser and sets ``func``; :func:`main` hands any error
to :func:`prep.cli.exits.fail`, which prints one line on stderr and picks the
exit status (0 OK, 1 verification mismatch, 2 unusable input or usage error,
3 a bug).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from prep.cli.exits import OneLineParser, epilog, fail

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
    parser = OneLineParser(prog="prep", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level; tracebacks for unexpected errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS:
        importlib.import_module(f"prep.cli.{name}").register(sub)
    for name, command in sub.choices.items():
        command.epilog = epilog(mismatch=name == "verify")
        command.set_defaults(command_parser=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed as one line
        return int(exc.code or 0)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except Exception as exc:  # one line and an exit code, whatever went wrong (see prep.cli.exits)
        return fail(exc, command=args.command, parser=args.command_parser, argv=argv, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
