"""notebooks/quickstart.ipynb runs top to bottom on small data, and is kept in git without outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "notebooks" / "quickstart.ipynb"


def test_the_notebook_is_stored_without_outputs():
    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)


@pytest.mark.slow
def test_the_quickstart_notebook_runs_end_to_end(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="the notebook extra (nbformat) is not installed")
    nbclient = pytest.importorskip("nbclient", reason="the notebook extra (nbclient) is not installed")
    monkeypatch.setenv("PREP_NOTEBOOK_ROWS", "200")
    monkeypatch.setenv("PREP_NOTEBOOK_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the kernel imports this checkout
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "rows: read 201 = written 200 + rejected 1" in text
    assert "[[" in text and "]]" in text  # a decoded row marks its masked prompt
    assert "resumed at epoch" in text and "the same batch as the uninterrupted run" in text
    assert "bound by: consumer" in text  # a 20 ms step on 200 short rows: the reader keeps up
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 3  # the table, the materialized output and the bench plots
    for name in ("demo-sft.png", "demo-epochs.png", "bench.png"):
        assert (tmp_path / "out" / name).stat().st_size > 10_000
