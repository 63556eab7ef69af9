"""A benchmark's work folder: one a benchmark made, so what it clears there is its own.

The benchmarks rebuild their outputs under ``--work`` (``out/``, inputs per factor,
materialized epochs) by removing the previous ones by name. A folder a user already keeps
data in (``--work .`` in a checkout whose ``out/`` holds their tables) must never be one of
them: a folder is used only if it is new, empty, or marked by an earlier benchmark run.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["MARK", "work_folder"]

MARK = ".prep-benchmark"  # an empty file: this folder was made by a prep benchmark


def work_folder(path: str | Path) -> Path:
    """``path``, created and marked if new or empty; a one-line exit if it holds anything a benchmark did not make.

    Raises:
        SystemExit: ``path`` is not empty and has no :data:`MARK`.
    """
    path = Path(path)
    if path.is_dir() and any(path.iterdir()) and not (path / MARK).is_file():
        raise SystemExit(f"{path}: holds files and was not made by a prep benchmark (no {MARK}); the benchmarks "
                         f"remove and rebuild their outputs under --work, so give a new or empty folder")
    path.mkdir(parents=True, exist_ok=True)
    (path / MARK).touch()
    return path
