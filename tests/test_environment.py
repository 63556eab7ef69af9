"""prep installs beside a user's stack: ranges in pyproject.toml, the exact development set in constraints/dev.txt.

The ranges have lower bounds only (each one a version scripts/test-oldest.sh ran the suite on) and no
upper caps; the lock pins every one of them inside its range; whatever is installed satisfies the ranges.
"""

import re
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from conftest import REPO

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
LOCK = REPO / "constraints" / "dev.txt"


def requirements(extras: list[str] | None = None) -> list[Requirement]:
    """The dependencies and ``extras`` (default: every extra), without the extras' references to prep itself."""
    groups = PROJECT["optional-dependencies"]
    found = [Requirement(r) for r in PROJECT["dependencies"]]
    for name in groups if extras is None else extras:
        found += [Requirement(r) for r in groups[name]]
    return [r for r in found if canonicalize_name(r.name) != canonicalize_name(PROJECT["name"])]


def ci_extras() -> list[str]:
    """``test`` and the extras it names (``prep-lance[hf,...]``): what CI installs from the lock."""
    names = ["test"]
    for r in PROJECT["optional-dependencies"]["test"]:
        req = Requirement(r)
        if canonicalize_name(req.name) == canonicalize_name(PROJECT["name"]):
            names += sorted(req.extras)
    return names


def locked() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, pinned = line.partition("==")
            pins[canonicalize_name(name)] = pinned.strip()
    return pins


def test_dependencies_are_ranges_with_a_lower_bound_and_no_cap():
    for req in requirements():
        operators = {spec.operator for spec in req.specifier}
        assert operators == {">="}, f"{req}: give a lower bound only (name>=VERSION), no pins or caps without a known break"


def test_the_lock_pins_every_dependency_ci_installs_inside_its_range():
    pins = locked()
    for req in requirements(ci_extras()):
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is missing from {LOCK.name}"
        assert req.specifier.contains(pins[name], prereleases=True), f"{LOCK.name} pins {name}=={pins[name]} outside {req}"


def test_installed_versions_lie_inside_the_ranges():
    outside = {}
    for req in requirements():
        try:
            installed = version(req.name)
        except PackageNotFoundError:
            continue  # an extra this environment did not install
        if not req.specifier.contains(Version(installed).public, prereleases=True):
            outside[req.name] = (str(req.specifier), installed)
    assert not outside, f"installed versions outside pyproject.toml's ranges: {outside}"


def test_the_distribution_is_prep_lance_and_ships_py_typed():
    assert PROJECT["name"] == "prep-lance"  # `prep` on the package index is an unrelated project
    assert (REPO / "prep" / "py.typed").is_file()
    assert 'prep = ["py.typed"]' in (REPO / "pyproject.toml").read_text()


def test_python_versions_claimed_are_those_tested():
    claimed = [c.rsplit(":: ", 1)[1] for c in PROJECT["classifiers"] if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert claimed == ["3.11"], "claim a Python version in pyproject.toml only after the suite ran on it (docs/versions.md)"
    assert PROJECT["requires-python"] == ">=3.11"


def test_lower_bounds_script_pins_each_range_to_its_floor():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "lower_bounds.py")], capture_output=True, text=True, check=True)
    floors = dict(line.split("==") for line in proc.stdout.split())
    for req in requirements():
        assert floors[req.name.lower()] == next(iter(req.specifier)).version


def test_the_stack_imports_and_works_together(tmp_path):
    import lance
    import pyarrow as pa
    import torch
    import torchvision
    from torchvision.io import decode_jpeg  # fails with a mismatched torch ("operator torchvision::nms does not exist")

    t = pa.table({"x": pa.array([[1, 2], [3]], pa.list_(pa.int32()))})
    lance.write_dataset(t, tmp_path / "t.lance")
    assert lance.dataset(tmp_path / "t.lance").to_table().equals(t)
    assert callable(decode_jpeg) and torch.tensor([1]).item() == 1 and torchvision.__version__
