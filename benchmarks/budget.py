"""Materialize within a memory budget: the budget sweep and the big-table curve.

    python benchmarks/budget.py sweep --budgets all,64MiB,16MiB,4MiB,1MiB --executors local,ray
    python benchmarks/budget.py curve --factors 1,8,64                     # at the default budget
    python benchmarks/budget.py curve --factors 1,8 --budget 64MiB        # the same curve, far past the budget

Tables: the 1x pretrain table of ``benchmarks/scale.py`` (GSM8K train x16 as JSONL, ``prep
pretokenize`` once with the Mistral v3 tokenizer, ~23 M tokens, 119,568 rows), cached under
``--work``; factor ``f`` > 1 is that table's rows appended ``f`` times, each copy with new ids
(``id + k * 2**40``), as new fragments: a table of ``f`` times the rows without ``f`` times the
tokenizing (64x: 1.5 G tokens, ~5.6 GB).

Each run is a fresh ``prep materialize-shuffle --epochs 1 --splits 48`` process (random, clump 1)
measured by ``benchmarks/measure.py``: wall from process start to exit, CPU of the process tree,
peak RSS of the tree (sampled every 0.1 s). ``--executor ray`` starts a local Ray inside the
command (its start-up is in the figures; ``benchmarks/executors.py`` measures Ray against a
running head). Checks: ``prep verify`` exits 0 on every sweep output (and on the curve's up to
8x), and every output selects all rows of its table. Ratios are against the run that holds
every row (budget ``all``, 64 GiB) of the same executor in the same invocation; runs alternate
budget by budget, ``--runs`` times, and the medians are printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402  (benchmarks/ is not a package: its inputs, measuring and checks)
from workdir import work_folder  # noqa: E402

ALL = "64GiB"  # a budget that holds every row of these tables: the in-memory run


def base_table(work: Path) -> tuple[Path, int]:
    """The 1x pretrain table (cached) and its row count."""
    table = work / "tables" / "f1.lance"
    if not (table / "_versions").exists():
        text = scale.text_inputs(work, 1)
        scale.measured([str(scale.PREP), "pretokenize", "--input", text["pretrain"], "--output", str(table), "--overwrite",
                        "--tokenizer", str(scale.TOKENIZER), "--format", "pretrain", "--max-length", "512",
                        "--overlong", "truncate", "--executor", "local", "-q"], "pretokenize")
    return table, scale.prep_json("inspect", str(table))["num_rows"]


def grown_table(work: Path, factor: int) -> tuple[Path, int]:
    """The 1x table's rows ``factor`` times, each copy with new ids (cached)."""
    base, rows = base_table(work)
    if factor == 1:
        return base, rows
    table = work / "tables" / f"f{factor}.lance"
    if not (table / "_versions").exists():
        import lance
        import pyarrow as pa
        import pyarrow.compute as pc

        scale.remove(str(table))
        source = lance.dataset(str(base))
        schema = source.schema
        for k in range(factor):
            def copies(k: int = k):
                for batch in source.to_batches(batch_size=65536):
                    ids = pc.add(batch.column("id"), pa.scalar(k << 40, pa.uint64()))
                    yield batch.set_column(batch.schema.get_field_index("id"), "id", ids)
            lance.write_dataset(pa.RecordBatchReader.from_batches(schema, copies()), str(table), schema=schema,
                                mode="create" if k == 0 else "append", max_rows_per_file=1 << 20)
    return table, rows * factor


def materialize(table: Path, out: Path, budget: str, executor: str) -> dict:
    """One measured run; its figures."""
    scale.remove(str(out))
    m = scale.measured([str(scale.PREP), "materialize-shuffle", "--table", str(table), "--output", str(out), "--epochs", "1",
                        "--splits", "48", "--executor", executor, "--max-memory", budget, "-q"], f"materialize {budget}")
    return {"wall": m.wall_s, "cpu": m.cpu_s, "tree_mb": m.peak_tree_rss / 1e6, "proc_mb": m.peak_process_rss / 1e6}


def check(out: Path, rows: int, verify: bool) -> None:
    if verify:
        scale.check_verify(out, rows)
    elif scale.prep_json("inspect", str(out))["num_selected_rows"] != rows:
        raise scale.CheckFailed(f"{out}: not every row of the table was selected")


def sweep(work: Path, budgets: list[str], executors: list[str], runs: int) -> list[dict]:
    table, rows = base_table(work)
    results: dict[tuple[str, str], list[dict]] = {}
    for run in range(runs):
        for executor in executors:
            for budget in budgets:
                out = work / "out" / "sweep"
                fig = materialize(table, out, ALL if budget == "all" else budget, executor)
                if run == 0:
                    check(out, rows, verify=True)
                results.setdefault((executor, budget), []).append(fig)
                print(f"  run {run} {executor:5} {budget:>6}: {fig['wall']:.1f} s wall, {fig['cpu']:.1f} CPU-s, "
                      f"{fig['tree_mb']:,.0f} MB tree", flush=True)
    return _medians(results, base=lambda executor, budget: (executor, "all"))


def curve(work: Path, factors: list[int], budget: str, runs: int) -> list[dict]:
    results: dict[tuple[str, str], list[dict]] = {}
    for factor in factors:
        table, rows = grown_table(work, factor)
        for run in range(runs):
            out = work / "out" / "curve"
            fig = materialize(table, out, budget, "local")
            if run == 0:
                check(out, rows, verify=factor <= 8)
            fig["rows"] = rows
            results.setdefault((f"{factor}x", budget), []).append(fig)
            print(f"  {factor}x run {run}: {fig['wall']:.1f} s wall, {fig['cpu']:.1f} CPU-s, {fig['tree_mb']:,.0f} MB tree",
                  flush=True)
        scale.remove(str(work / "out" / "curve"))
    first = f"{factors[0]}x"
    return _medians(results, base=lambda what, budget: (first, budget), per_row=True)


def _medians(results: dict, base, per_row: bool = False) -> list[dict]:
    """Median figures per case, with wall and CPU against the case ``base(*case)`` (per row when ``per_row``)."""
    med = {case: {k: statistics.median(f[k] for f in figs) for k in figs[0]} for case, figs in results.items()}
    out = []
    for case, fig in med.items():
        ref = med[base(*case)]
        scale_by = (ref["rows"] / fig["rows"]) if per_row else 1.0
        out.append({"case": case[0], "budget": case[1], **fig, "wall_x": fig["wall"] / ref["wall"] * scale_by,
                    "cpu_x": fig["cpu"] / ref["cpu"] * scale_by})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["sweep", "curve"])
    ap.add_argument("--work", default="/tmp/prep-budget-bench", help="work folder (inputs and tables cached there)")
    ap.add_argument("--budgets", default="all,64MiB,16MiB,4MiB,1MiB", help="sweep: budgets, 'all' = hold every row")
    ap.add_argument("--executors", default="local,ray", help="sweep: executors")
    ap.add_argument("--factors", default="1,8,64", help="curve: table sizes, multiples of the 1x table")
    ap.add_argument("--budget", default=None, help="curve: --max-memory (default: prep's default)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    work = work_folder(args.work)
    try:
        if args.what == "sweep":
            rows = sweep(work, args.budgets.split(","), args.executors.split(","), args.runs)
        else:
            from prep.materialize.budget import default_max_memory

            budget = args.budget or f"{default_max_memory() >> 20}MiB"
            rows = curve(work, [int(f) for f in args.factors.split(",")], budget, args.runs)
    except scale.CheckFailed as exc:
        print(f"CHECK FAILED: {exc}", file=sys.stderr)
        return 1
    print("\n| case | budget | wall s | CPU s | wall x | CPU x | peak tree MB |\n|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['budget']} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['wall_x']:.2f} | {r['cpu_x']:.2f} | "
              f"{r['tree_mb']:,.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
