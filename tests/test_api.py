"""`from prep import ...` gives the names a user needs, each imported on first use: `import prep` loads
no torch, Ray or Lance, and the reader's names never load Ray."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

import prep
from conftest import REPO

HEAVY = ("torch", "ray", "lance", "pyarrow", "transformers")


def loaded_after(code: str) -> set[str]:
    """The heavy top-level packages loaded by a fresh interpreter after running ``code``."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return set(proc.stdout.split())


def test_import_prep_loads_nothing_heavy():
    assert loaded_after("import prep") == set()


def test_the_reader_names_never_load_ray():
    loaded = loaded_after("from prep import ReaderDataset, Loader")
    assert "torch" in loaded and "ray" not in loaded


def test_every_public_name_resolves_and_is_listed():
    for name in prep.__all__:
        assert getattr(prep, name) is not None
    assert set(prep.__all__) <= set(dir(prep))
    with pytest.raises(AttributeError, match="no attribute 'Reader'"):
        prep.Reader  # noqa: B018


def test_the_prepare_functions_take_the_clis_flags_as_keywords():
    from prep.cli import build_parser, commands

    for command, function in (("pretokenize", prep.pretokenize), ("decode-images", prep.decode_images)):
        flags = {a.dest for a in commands(build_parser())[command]._actions if a.option_strings}
        params = set(inspect.signature(function).parameters)
        cli_only = {"help", "json", "verbose", "quiet", "settings"}  # --set KEY=VALUE: the functions' **keys
        assert flags - cli_only <= params, f"{command}: flags without a keyword: {flags - cli_only - params}"
