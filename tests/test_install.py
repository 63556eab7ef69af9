"""prep installs beside the stacks users have: pip's resolver keeps their versions (scripts/resolve_beside.py).

The resolutions ask the package index (metadata only, ~1 min each): slow tier, skipped when the index
cannot be reached. Issue 33 found none of them resolving: mistral-common capped numpy below 2.4,
fsspec >= 2026.9.0 excluded every HF datasets release, torch started at 2.13.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tomllib
import urllib.request

import pytest
from packaging.requirements import Requirement

from conftest import REPO
from prep.errors import PrepError

sys.path.insert(0, str(REPO / "scripts"))
import resolve_beside  # noqa: E402  (scripts/ is not a package)

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _index_reachable() -> bool:
    url = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/") + "/pip/"
    try:
        with urllib.request.urlopen(url, timeout=10):
            return True
    except OSError:
        return False


def test_mistral_common_is_the_mistral_extra_not_a_dependency():
    names = {Requirement(r).name for r in PROJECT["dependencies"]}
    assert "mistral-common" not in names
    assert [Requirement(r).name for r in PROJECT["optional-dependencies"]["mistral"]] == ["mistral-common"]
    assert "mistral" in Requirement(PROJECT["optional-dependencies"]["test"][0]).extras  # CI and the demo keep it


def test_the_builtin_tokenizer_without_mistral_common_names_the_extra(monkeypatch):
    from prep.prepare.text import tokenizer

    monkeypatch.setitem(sys.modules, "mistral_common", None)  # `import mistral_common` now raises ImportError
    with pytest.raises(PrepError, match=r"builtin:mistral-v3 needs the mistral-common package: pip install 'prep-lance\[mistral\]'"):
        tokenizer._builtin_mistral_v3_dir()


def test_the_license_is_an_spdx_string():
    """A table (``{text = ...}``) made setuptools print a deprecation warning three times per install."""
    assert PROJECT["license"] == "Apache-2.0"


@pytest.mark.slow
def test_prep_resolves_beside_the_newest_numpy_the_oldest_datasets_and_torch_keeping_them():
    """One resolution (minutes on a busy machine); ``python scripts/resolve_beside.py`` tries each stack alone."""
    if importlib.util.find_spec("pip") is None or not _index_reachable():
        pytest.skip("the package index cannot be reached from here")
    pins = resolve_beside.STACKS["all at once"]
    resolved = resolve_beside.resolve(pins)
    assert resolve_beside.kept(pins, resolved) == []
    assert "prep-lance" in resolved
