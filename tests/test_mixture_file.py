"""Mixture files with hostile numbers: one line naming the file and the key, exit 2, nothing allocated (issue 21 #12)."""

from __future__ import annotations

import pytest

import tables
from prep.cli import main
from prep.errors import PrepError
from prep.materialize.mixture.run import PLAN_BYTES_PER_ROW, check_plannable
from prep.materialize.mixture.file import load_mixture
from prep.plan import mixture as mixplan


@pytest.fixture(scope="module")
def two(tmp_path_factory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("src")
    return (tables.synthetic_table(str(root / "a.lance"), num_rows=200, max_len=30),
            tables.synthetic_table(str(root / "b.lance"), num_rows=100, seed=1, max_len=30))


def mixture_file(tmp_path, two, weights=("3", "1"), extra="") -> str:
    path = tmp_path / "mix.yaml"
    path.write_text(f"weight_by: rows\nglobal_batch: 8\n{extra}sources:\n  - {{table: {two[0]}, weight: {weights[0]}}}\n"
                    f"  - {{table: {two[1]}, weight: {weights[1]}}}\n")
    return str(path)


def refused(capsys, path: str, out: str) -> str:
    """Runs the CLI on the mixture; returns its one stderr line (exit 2)."""
    assert main(["materialize-shuffle", "--mixture", path, "--output", out, "--epochs", "1", "--splits", "4",
                 "--executor", "local"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("weights,says", [
    ((".inf", "1"), r"weight=inf must be a finite number > 0 and <= 1e\+15"),
    (("1.0e+308", "1.0e+308"), r"weight=1e\+308 must be a finite number > 0 and <= 1e\+15"),
    ((".nan", "1"), r"weight=nan must be a finite number"),
    (("-1", "1"), r"weight=-1 must be a finite number > 0"),
    (("1e-3", "1"), r"weight='1e-3' must be a finite number > 0 and <= 1e\+15 \(read as the string '1e-3': "
                    r"YAML reads 1e-3 as text; write 1.0e-3\)"),
])
def test_a_bad_weight_is_one_line_naming_the_file_and_the_key(two, tmp_path, capsys, weights, says):
    path = mixture_file(tmp_path, two, weights)
    with pytest.raises(PrepError, match=says):
        load_mixture(path, 4)
    line = refused(capsys, path, str(tmp_path / "out"))
    assert path in line and "sources[" in line


def test_weights_too_far_apart_to_split_batches_exactly_are_one_line(two, tmp_path, capsys):
    path = mixture_file(tmp_path, two, ("1.0e+15", "1.0e-6"))
    line = refused(capsys, path, str(tmp_path / "out"))
    assert "are too far apart or too finely divided" in line
    assert mixplan.batch_counts([1e15, 1], 8, 0, 1).tolist() == [[8, 0]]  # far apart but exact: fine


def test_an_epoch_too_big_to_plan_is_refused_before_anything_is_allocated(two, tmp_path, capsys):
    path = mixture_file(tmp_path, two, extra="epoch_rows: 100000000000\n")
    line = refused(capsys, path, str(tmp_path / "out"))
    assert f"epoch_rows=100,000,000,000 needs ~{100_000_000_000 * PLAN_BYTES_PER_ROW / 2**30:,.1f} GiB to plan" in line
    assert "lower epoch_rows or epoch_tokens" in line
    check_plannable(1_000_000, "mixture")  # a million rows plan on any machine


def test_a_quoted_number_says_to_write_it_without_quotes(two, tmp_path):
    path = mixture_file(tmp_path, two, extra="epoch_rows: '800'\n")
    with pytest.raises(PrepError, match=r"epoch_rows='800' must be an integer >= 1 \(read as the string '800': "
                                        r"write it without quotes, 800\)"):
        load_mixture(path, 4)
