"""The pinned versions are the ones installed, and they work together."""

import re
import tomllib
from importlib.metadata import version

from conftest import REPO


def pins() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = [d for group in project["optional-dependencies"].values() for d in group]
    deps = project["dependencies"] + [d for d in extras if not d.startswith("prep[")]  # prep[...]: the extras themselves
    return {re.split(r"[\[=]", d)[0]: d.split("==")[1] for d in deps}


def test_installed_versions_match_the_pins():
    mismatched = {name: (want, version(name)) for name, want in pins().items() if version(name).split("+")[0] != want}
    assert not mismatched, f"installed versions differ from pyproject.toml: {mismatched}"


def test_the_stack_imports_and_works_together(tmp_path):
    import lance
    import pyarrow as pa
    import torch
    import torchvision
    from torchvision.io import decode_jpeg  # fails with a mismatched torch ("operator torchvision::nms does not exist")

    assert torch.__version__.startswith("2.14.1") and torchvision.__version__.startswith("0.29.1")
    t = pa.table({"x": pa.array([[1, 2], [3]], pa.list_(pa.int32()))})
    lance.write_dataset(t, tmp_path / "t.lance")
    assert lance.dataset(tmp_path / "t.lance").to_table().equals(t)
    assert callable(decode_jpeg)

