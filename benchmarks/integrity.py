"""Benchmark: what content integrity costs (issue 31): the table check, and a rerun over an intact output.

    .venv/bin/python benchmarks/integrity.py                     # GSM8K train x16, 32 splits
    .venv/bin/python benchmarks/integrity.py --before /tmp/prep-before   # also the rerun of the code in DIR
                                                                  # (git archive COMMIT | tar -x -C DIR)

The table is benchmarks/materialize.py's (GSM8K train x16 as pretrain rows, 119,568 rows,
23.1 M tokens, prepared by ``prep pretokenize`` with this checkout, so it records its
file checksums). Each row is one operation in a fresh process (imports excluded), the
median of ``--runs``: wall seconds and CPU seconds (all threads of the process).

- ``check``: :func:`prep.io.table_checksums.check_table`, every file of the table read and hashed.
- ``job``: ``materialize_shuffle(epochs=1, splits=32)`` into an empty output (the check included).
- ``rerun``: the same call again over the intact output: every done split checked, none written.
- ``before-rerun``: with ``--before``, that rerun with the ``prep`` of DIR (sizes checked, not content).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from materialize import ENV, REPO, build_table  # benchmarks/ is the script's folder, so on sys.path
from workdir import work_folder


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def stage(name: str, table: str, out: str, splits: int) -> dict:
    """One operation in this (fresh) process: its wall and CPU seconds."""
    from prep.materialize import materialize_shuffle

    if name == "check":
        from prep.io.table_checksums import check_table

        t, c = time.perf_counter(), _cpu()
        found = check_table(table)
        assert found.recorded and found.ok, found
        return {"seconds": time.perf_counter() - t, "cpu_seconds": _cpu() - c, "mb": found.bytes / 1e6}
    if name == "job":
        shutil.rmtree(out, ignore_errors=True)
    t, c = time.perf_counter(), _cpu()
    materialize_shuffle(table=table, output=out, epochs=1, splits=splits, executor="local")
    return {"seconds": time.perf_counter() - t, "cpu_seconds": _cpu() - c}


def fresh(name: str, table: Path, out: Path, splits: int, code: Path = REPO) -> dict:
    run = [sys.executable, __file__, "--stage", name, "--table", str(table), "--out", str(out), "--splits", str(splits)]
    done = subprocess.run(run, env={**ENV, "PYTHONPATH": str(code)}, cwd=code, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp/prep-bench-integrity")
    ap.add_argument("--repeat", type=int, default=16)
    ap.add_argument("--splits", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", help="a folder holding another prep checkout: its rerun is timed too")
    ap.add_argument("--stage", help=argparse.SUPPRESS)
    ap.add_argument("--table", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stage:
        print(json.dumps(stage(args.stage, args.table, args.out, args.splits)))
        return
    work = work_folder(args.workdir)
    table, out = build_table(work, args.repeat), work / "epochs"
    rows = [("check", REPO), ("job", REPO), ("rerun", REPO)] + ([("before-rerun", Path(args.before))] if args.before else [])
    print(f"table {table} ({args.repeat}x GSM8K), {args.splits} splits, median of {args.runs} runs")
    for name, code in rows:
        got = [fresh(name.removeprefix("before-"), table, out, args.splits, code) for _ in range(args.runs)]
        med = {k: statistics.median(g[k] for g in got) for k in got[0]}
        print(f"{name:14s} " + "  ".join(f"{k} {v:8.2f}" for k, v in med.items()), flush=True)


if __name__ == "__main__":
    main()
