"""Asks pip's resolver whether prep installs beside a user's stack, keeping the stack's versions.

Each stack is a set of pins a user already has (the newest numpy, HF datasets, an older torch);
``pip install --dry-run`` resolves prep together with them from the package index, downloading
metadata only. Local wheel folders and pip's config files are set aside, as in
scripts/test-oldest.sh, so the answer is the index's. tests/test_install.py runs it (slow tier).

    python scripts/resolve_beside.py                          # every stack, with this Python's pip
    python scripts/resolve_beside.py --python ~/.pyenv/versions/3.12.1/bin/python numpy==2.4.6
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# What users come with (issue 33): the newest numpy, HF datasets 4.8-5.1 (each caps fsspec), torch 2.12.
STACKS: dict[str, list[str]] = {
    "numpy 2.4.6": ["numpy==2.4.6"],
    "datasets 5.1.0": ["datasets==5.1.0"],
    "datasets 5.0.1": ["datasets==5.0.1"],
    "datasets 4.8.5": ["datasets==4.8.5"],
    "torch 2.12.1": ["torch==2.12.1", "torchvision==0.27.1"],
    # the newest numpy, the oldest datasets prep installs beside (the lowest fsspec cap) and the oldest torch
    "all at once": ["numpy==2.4.6", "datasets==4.8.5", "torch==2.12.1"],
}


def resolve(pins: list[str], *, python: str = sys.executable, target: str = ".[hf]") -> dict[str, str]:
    """``{distribution: version}`` pip would install for prep (``target``, from this checkout) beside ``pins``.

    Raises:
        RuntimeError: pip cannot resolve them together (its own lines say which requirement conflicts).
    """
    env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS" and not k.startswith("PIP_CONSTRAINT")}
    env["PIP_CONFIG_FILE"] = os.devnull
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        proc = subprocess.run(
            [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
             str(REPO) + target.removeprefix("."), *pins],
            capture_output=True, text=True, env=env, cwd=tmp)
        if proc.returncode != 0:
            lines = [line for line in proc.stderr.splitlines() if re.match(r"ERROR|The conflict|    \S", line)]
            raise RuntimeError("\n".join(lines[-12:]) or proc.stderr[-2000:])
        installs = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in installs}


def kept(pins: list[str], resolved: dict[str, str]) -> list[str]:
    """The pins the resolution does not keep as given (empty: every one kept)."""
    out = []
    for pin in pins:
        name, _, want = pin.partition("==")
        if resolved.get(name.lower()) != want:
            out.append(f"{pin} (got {resolved.get(name.lower())})")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose pip resolves (default: this one)")
    parser.add_argument("pins", nargs="*", help="one stack of pins (default: every stack of STACKS)")
    args = parser.parse_args()
    stacks = {" ".join(args.pins): args.pins} if args.pins else STACKS
    failed = 0
    for name, pins in stacks.items():
        try:
            resolved = resolve(pins, python=args.python)
            kept_out = kept(pins, resolved)
        except RuntimeError as exc:
            print(f"{name}: does not resolve\n{exc}")
            failed += 1
            continue
        if kept_out:
            print(f"{name}: resolves but changes {', '.join(kept_out)}")
            failed += 1
        else:
            shown = ", ".join(f"{k} {resolved[k]}" for k in ("torch", "numpy", "fsspec", "s3fs", "transformers") if k in resolved)
            print(f"{name}: resolves, pins kept ({shown})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
