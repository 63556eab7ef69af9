"""``prep <command>``: one module per command, each with ``register(subparsers)``.

A command module adds its parser (with a description that ends in one example)
and sets ``func``; :func:`main` sets up logging and progress (:mod:`prep.runtime.logs`)
and hands any error to :func:`prep.cli.exits.fail`, which prints one line on
stderr and picks the exit status (0 OK, 1 verification mismatch, 2 unusable input
or usage error, 3 a bug). A command whose stdout reader leaves early (``| head``) ends quietly with 0.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap
from importlib import metadata

import prep
from prep.runtime import logs
from prep.cli.exits import OneLineParser, epilog, fail

__all__ = ["main", "build_parser", "commands", "DESCRIPTION"]

DESCRIPTION = """\
Get training data onto accelerators without wasting GPU time, in three stages:
prepare (text or images -> a Lance table + a rejects table), materialize (shuffled
epochs laid out as splits: any global batch, any world size dividing it, the same global
batches), read (prep.reader, a torch dataset with exact resume). Look at any of
their outputs with `prep inspect`; see where reading time goes with `prep bench`.

example:
  prep pretokenize --config configs/gsm8k-sft.yaml --output out/gsm8k.lance
  prep inspect out/gsm8k.lance --rows 2 --plot gsm8k.png
  prep materialize-shuffle --table out/gsm8k.lance --output out/gsm8k-epochs --epochs 3
  prep bench out/gsm8k-epochs --global-batch-size 96 --consumer-ms 50"""

_COMMANDS = (
    "pretokenize",
    "decode_images",
    "inspect",
    "materialize_shuffle",
    "verify",
    "prewarm",
    "read",
    "bench",
)


def _version() -> str:
    """``prep 0.1.0 (pylance 14.0.2, ray 2.60.0, torch 2.14.1, python 3.11.x)``: what a bug report needs."""
    found = []
    for dist in ("pylance", "ray", "torch"):
        try:
            found.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            found.append(f"{dist} not installed")
    return f"prep {prep.__version__} ({', '.join(found)}, python {sys.version.split()[0]})"


def _add_output_flags(parser: argparse.ArgumentParser, default: object) -> None:
    """``-v``/``--quiet``, accepted before and after the command (``default`` SUPPRESS keeps the top-level value)."""
    parser.add_argument("-v", "--verbose", action="store_true", default=default,
                        help="also show INFO lines, Ray's/Lance's own messages and the image decoders' warnings "
                        "(libpng, libtiff); tracebacks for unexpected errors")
    parser.add_argument("-q", "--quiet", action="store_true", default=default, help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="prep", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=_version())
    _add_output_flags(parser, False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS:
        importlib.import_module(f"prep.cli.{name}").register(sub)
    for name, command in sub.choices.items():
        _add_output_flags(command, argparse.SUPPRESS)
        command.formatter_class = argparse.RawDescriptionHelpFormatter
        command.epilog = textwrap.fill(epilog(mismatch=name == "verify", rejects=name in ("pretokenize", "decode-images")), width=100)
        command.set_defaults(command_parser=command)
    return parser


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """``{name: parser}`` of every command, in the order ``prep --help`` lists them."""
    return next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed as one line
        return int(exc.code or 0)
    logs.configure(verbose=args.verbose, quiet=args.quiet)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so a reader that left (`| head`) is seen by fail(), not by the interpreter's exit
        return code
    except Exception as exc:  # one line and an exit code, whatever went wrong (see prep.cli.exits)
        return fail(exc, command=args.command, parser=args.command_parser, argv=argv, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
