"""Prints pip constraints that pin every dependency of pyproject.toml (extras included) to its lower bound.

scripts/test-oldest.sh installs with them, so the suite runs on exactly the oldest versions prep claims.
Run: python scripts/lower_bounds.py [pyproject.toml]
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(?P<spec>.*)$")


def lower_bounds(pyproject: Path) -> dict[str, str]:
    """{distribution: lower bound} over the dependencies and every extra (``prep-lance[...]`` self-references skipped)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    requirements = list(project["dependencies"])
    for group in project.get("optional-dependencies", {}).values():
        requirements += group
    bounds: dict[str, str] = {}
    for requirement in requirements:
        match = REQUIREMENT.match(requirement.split(";")[0].strip())
        if match is None:
            raise SystemExit(f"{pyproject}: cannot read the requirement {requirement!r}")
        name = match["name"].lower()
        if name == project["name"]:
            continue
        found = re.search(r">=\s*([^,\s]+)", match["spec"])
        if found is None:
            raise SystemExit(f"{pyproject}: {requirement!r} has no lower bound (write it as name>=VERSION)")
        if bounds.get(name, found[1]) != found[1]:
            raise SystemExit(f"{pyproject}: {name} has two lower bounds, {bounds[name]} and {found[1]}")
        bounds[name] = found[1]
    return bounds


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "pyproject.toml")
    for name, version in sorted(lower_bounds(path).items()):
        print(f"{name}=={version}")


if __name__ == "__main__":
    main()
