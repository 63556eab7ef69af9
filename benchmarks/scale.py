"""Scale curves: does time per token stay flat and memory stay bounded as the data grows?

    python benchmarks/scale.py --factors 1,8,64 --plot scale.png --json scale.json
    python benchmarks/scale.py --factors 0.02,0.05 --plot /tmp/scale.png      # a smoke run (~3 minutes here)
    python benchmarks/scale.py --factors 1,8 --stages pretokenize-pretrain,shuffle-random

Workload at factor ``f`` (built once per factor and cached under ``--work``/inputs):

- text: GSM8K train repeated ``16 * f`` times (1x: 119,568 rows, ~23 M tokens; 64x: ~1.5 G
  tokens), as many JSONL files of 119,568 rows each (the 1x size; the last one shorter): a
  corpus at scale is many files, not one large one. ``pretrain`` rows are
  ``{"text": question + "\\n" + answer}`` (1x: 64.7 MB), ``sft`` rows are
  ``{"messages": [user question, assistant answer]}`` (1x: 73.2 MB); Mistral v3 tokenizer,
  ``max_length: 512``, ``overlong: truncate``.
- images: the hymenoptera train photos (245 files, 27.2 MB), repeated to the bytes of the
  1x pretrain corpus (1x: 583 images, 64.8 MB), ``f`` times that; an ImageFolder tree.

Stages, each a fresh process as a user runs it (local executor: no Ray):

  pretokenize-pretrain  ``prep pretokenize`` of the pretrain files -> the table the next stages use
  pretokenize-sft       ``prep pretokenize`` of the sft files
  decode-images         ``prep decode-images`` of the photos (224x224)
  shuffle-random        ``prep materialize-shuffle`` of the pretrain table, ``--epochs 1``, 48 splits
  read-epoch            one epoch of the shuffle-random output read with ``prep.reader.ReaderDataset``
                        (global batch 32) through ``DataLoader(batch_size=None)``, counting rows and tokens
  shuffle-clump64       the same as shuffle-random with ``--clump 64``

Columns (one row per stage and factor; measured by ``benchmarks/measure.py``):

  units      what the stage processed: tokens of its table (text stages, the read: tokens read),
             images for decode-images
  wall s     process start to exit
  CPU s      user + system of the whole process tree (sandboxes, forkserver included)
  CPU/unit   CPU microseconds per token (ms per image for decode-images; also CPU s per input MB)
  t/unit x   wall time per unit relative to the same stage at the smallest factor run
             (goal at 8x and 64x: <= 1.2); ``cpu x`` the same for CPU per unit
  tree MB    peak RSS summed over the whole process tree (sampled every 0.1 s)
  proc MB    peak RSS of the largest single process
  out MB     bytes of the stage's output on disk (table + rejects table; the materialized directory)

Checks at every factor (a failed one ends the run with exit status 1 and the reason):
table rows + rejects rows == input rows and the table's token count (its ``length``
column, ``prep inspect --json``) == the job's own count, for each prepared table;
``prep verify`` exits 0 on each materialized output; the epoch read delivers every row of
the table but the dropped tail (``ReaderDataset.dropped_rows``), and its tokens plus the
tail's (the ``length`` of the rows past each split's last full step) == the table's tokens.

What bounds peak RSS (2 CPUs, default options):

- prepare (pretokenize, decode-images), local executor (``run_chunks`` in
  ``prep/prepare/chunk_runner.py`` on a ``LocalRunner``, ``prep/runtime/executor.py``): the driver plus one sandbox process per CPU (fewer while
  there are fewer chunks), each on one chunk at a time: ``chunk_bytes`` = 2 MiB of text
  (``prep/runtime/config.py``), at most ``images_per_chunk`` = 256 images or 64 MiB
  (``prep/prepare/images/config.py``). The driver keeps a small result per chunk (kilobytes).
  Measured at 0.05x: ~0.3 GB a process for text, ~1 GB for images (torch), so ~0.8 GB and
  ~1.6 GB for the trees.
- materialize, local executor: within its memory budget (``--max-memory``, default a quarter of
  the machine's memory: 6 GiB here; ``prep/materialize/budget.py``): the selected rows are held
  when they fit a third of it, else spilled to disk and read back group by group
  (``prep/materialize/rows/spill.py``), so its RSS grows with the table until the held rows reach
  the budget's third (GSM8K x16 is ~0.11 GB of Arrow rows: about 18x), then stays.
  ``benchmarks/budget.py`` sweeps the budget and runs the curve to 64x.
- read: the reader's queue (``prep/reader/options.py``): reads of ``read_bytes`` = 64 MiB,
  ``raw_chunks`` = 2 queued, ``prefetch_batches`` = 4 built ahead; ~0.8 GB measured (torch).

The bounds stated: prepare and read stay under 3 GB of tree RSS at any factor on 2 CPUs
(they grow with the CPUs, not the data); materialize stays within its budget plus its fixed
base (docs/materialize.md, "Memory").

Inputs are cached per factor; outputs go to ``--work``/out, are overwritten, and each is
deleted once the stages that need it are done (disk: 0.44 GB per 1x measured at 0.05x; at
64x the inputs are ~13 GB, the pretrain table ~6 GB and the materialized epoch beside it ~9 GB).
Before a factor, the free disk is printed and a factor that would not fit (estimated from
the largest factor already run, else from ``BYTES_PER_1X``) is refused.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data"
GSM8K = SHARED / "gsm8k" / "train.jsonl"
PHOTOS = SHARED / "hymenoptera" / "train"
TOKENIZER = SHARED / "tokenizers" / "mistral-v3"
PREP = Path(sys.executable).parent / "prep"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402  (benchmarks/ is not a package)
from workdir import work_folder  # noqa: E402

REPEAT_1X = 16  # GSM8K train copies at factor 1
GLOBAL_BATCH = 32
BYTES_PER_1X = 600_000_000  # disk at 1x, inputs + the outputs alive at once (0.44 GB measured at 0.05x), until a factor ran
RESERVE = 2 << 30  # free disk left to others
STAGES = ("pretokenize-pretrain", "pretokenize-sft", "decode-images", "shuffle-random", "read-epoch", "shuffle-clump64")
# in this order each output is deleted as soon as no later stage needs it: one materialized epoch on disk at a time
NEEDS = {"shuffle-random": "pretokenize-pretrain", "shuffle-clump64": "pretokenize-pretrain", "read-epoch": "shuffle-random"}
ENV = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "PYTHONPATH": str(REPO),
       "TOKENIZERS_PARALLELISM": "false", "RAY_DISABLE_USAGE_STATS": "1"}


class CheckFailed(Exception):
    """A correctness check of the benchmark failed."""


@dataclass
class Row:
    """One stage at one factor: the table's row (module docstring: the columns)."""

    factor: float
    stage: str
    units: int
    unit: str  # "token" or "image"
    wall_s: float
    cpu_s: float
    peak_tree_rss: int
    peak_process_rss: int
    out_bytes: int
    input_bytes: int
    cpu_per_unit: float = 0.0  # us/token, ms/image
    wall_ratio: float = 1.0
    cpu_ratio: float = 1.0


# ----------------------------------------------------------------------------- inputs
def tag(factor: float) -> str:
    return f"f{factor:g}"


def gsm8k_lines() -> dict[str, list[str]]:
    """One JSONL line per GSM8K train row, per format: what the inputs repeat."""
    rows = [json.loads(line) for line in GSM8K.open()]
    return {"pretrain": [json.dumps({"text": r["question"] + "\n" + r["answer"]}) + "\n" for r in rows],
            "sft": [json.dumps({"messages": [{"role": "user", "content": r["question"]},
                                             {"role": "assistant", "content": r["answer"]}]}) + "\n" for r in rows]}


def text_inputs(work: Path, factor: float) -> dict:
    """The pretrain and sft JSONL files of ``factor`` (cached): ``{"rows", "pretrain": dir, "sft": dir}``."""
    root = work / "inputs" / tag(factor)
    ready = root / "text.json"
    if ready.exists():
        return json.loads(ready.read_text())
    lines = gsm8k_lines()
    total, per_file = round(factor * REPEAT_1X * len(lines["sft"])), REPEAT_1X * len(lines["sft"])
    for fmt, cycle in lines.items():
        folder = root / fmt
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for k, start in enumerate(range(0, total, per_file)):
            with open(folder / f"part-{k:04d}.jsonl", "w") as f:
                f.writelines(cycle[i % len(cycle)] for i in range(start, min(start + per_file, total)))
    info = {"rows": total, "pretrain": str(root / "pretrain"), "sft": str(root / "sft")}
    ready.write_text(json.dumps(info))
    return info


def image_inputs(work: Path, factor: float) -> dict:
    """The photos repeated to ``factor`` times the 1x pretrain corpus's bytes (cached): ``{"images", "dir"}``."""
    root = work / "inputs" / tag(factor)
    ready = root / "images.json"
    if ready.exists():
        return json.loads(ready.read_text())
    photos = sorted(p for p in PHOTOS.rglob("*") if p.is_file() and not p.name.startswith("."))
    mean = sum(p.stat().st_size for p in photos) / len(photos)
    text_1x = REPEAT_1X * sum(len(line.encode()) for line in gsm8k_lines()["pretrain"])
    count = max(1, round(factor * text_1x / mean))
    folder = root / "images"
    shutil.rmtree(folder, ignore_errors=True)
    for i in range(count):
        p = photos[i % len(photos)]
        target = folder / p.parent.name / f"{i // len(photos)}-{p.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, target)
    info = {"images": count, "dir": str(folder)}
    ready.write_text(json.dumps(info))
    return info


def disk_bytes(*paths: str | Path) -> int:
    """Bytes allocated on disk under ``paths`` (files and folders; missing ones count 0)."""
    total = 0
    for path in map(Path, paths):
        files = [path] if path.is_file() else (p for p in path.rglob("*") if p.is_file()) if path.exists() else []
        total += sum(p.stat().st_blocks * 512 for p in files)
    return total


# ----------------------------------------------------------------------------- stages
def prep_json(*args: str) -> dict:
    """``prep ARGS --json`` (not measured: a check), parsed; a failure is a failed check."""
    proc = subprocess.run([str(PREP), *args, "--json"], capture_output=True, text=True, env=ENV)
    if proc.returncode:
        raise CheckFailed(f"prep {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def measured(cmd: list[str], what: str, apart: int | None = None, after: Callable[[], None] = lambda: None) -> measure.Measured:
    """``cmd`` measured (``apart``: :func:`measure.run`), then ``after()``; a non-zero exit ends the run with its stderr."""
    m = measure.run(cmd, env=ENV, cwd=REPO, apart=apart)
    after()
    if m.returncode:
        raise CheckFailed(f"{what}: {' '.join(cmd[:3])} ... exited {m.returncode}:\n{m.stderr.strip()[-3000:]}")
    if m.lingering:
        print(f"  note: {what} left processes running after it exited: {m.lingering}", flush=True)
    return m


def outputs(stage: str, out: Path) -> list[Path]:
    """What a stage writes (deleted once no later stage needs it)."""
    return {"pretokenize-pretrain": [out / "pretrain.lance", out / "pretrain.rejects.lance"],
            "pretokenize-sft": [out / "sft.lance", out / "sft.rejects.lance"],
            "decode-images": [out / "images.lance", out / "images.rejects.lance"],
            "shuffle-random": [out / "random"], "shuffle-clump64": [out / "clump64"], "read-epoch": []}[stage]


def under(out: Path, store: str | None, name: str) -> str:
    """Where a stage writes ``name``: in the work folder, or under ``store`` (an object store prefix,
    ``benchmarks/executors.py --s3``)."""
    return f"{store.rstrip('/')}/{name}" if store else str(out / name)


def remove(path: str) -> None:
    """Removes an output folder, local or in an object store (missing is fine)."""
    if "://" not in path:
        shutil.rmtree(path, ignore_errors=True)
        return
    import fsspec

    fs, root = fsspec.core.url_to_fs(path)
    if fs.exists(root):
        fs.rm(root, recursive=True)


def check_table(table: Path | str, input_rows: int, job_tokens: int | None) -> dict:
    """Table rows + rejects == input rows, and (text) the table's token count == the job's; the inspect report."""
    report = prep_json("inspect", str(table))
    rows, rejected = report["num_rows"], report["rejects"]["num_rows"]
    if rows + rejected != input_rows:
        raise CheckFailed(f"{table}: {rows:,} rows + {rejected:,} rejects != {input_rows:,} input rows")
    if job_tokens is not None and report["tokens"] != job_tokens:
        raise CheckFailed(f"{table}: its length column sums to {report['tokens']:,} tokens, the job counted {job_tokens:,}")
    return report


def check_verify(output: Path | str, table_rows: int) -> None:
    """``prep verify`` exits 0, and the output selected every row of the table."""
    proc = subprocess.run([str(PREP), "verify", str(output), "-q"], capture_output=True, text=True, env=ENV)
    if proc.returncode:
        raise CheckFailed(f"prep verify {output} exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-2000:]}")
    selected = prep_json("inspect", str(output))["num_selected_rows"]
    if selected != table_rows:
        raise CheckFailed(f"{output}: {selected:,} rows selected of a table of {table_rows:,}")


LOCAL = ("--executor", "local")


def run_stage(stage: str, out: Path, text: dict, images: dict, facts: dict, executor: Sequence[str] = LOCAL,
              apart: int | None = None, after: Callable[[], None] = lambda: None,
              store: str | None = None) -> tuple[measure.Measured, int, str, int, int]:
    """Runs ``stage`` measured and checks its output; ``facts`` carries what later checks need.

    ``executor``: the flags that say where a job runs (``benchmarks/executors.py`` passes a Ray
    cluster's, and the Ray head's process as ``apart``); ``after()`` runs when the job has exited,
    before the checks (which run processes of their own); ``store``: write the outputs there
    (:func:`under`) instead of ``out``, which then holds only the configs. Returns: (measurement,
    units, unit, output bytes (local outputs only), input bytes).
    """
    if stage.startswith("pretokenize-"):
        fmt = stage.removeprefix("pretokenize-")
        config = out / f"{fmt}.yaml"
        config.write_text(json.dumps({"input": text[fmt], "output": under(out, store, f"{fmt}.lance"), "tokenizer": str(TOKENIZER),
                                      "format": fmt, "max_length": 512, "overlong": "truncate",
                                      **({"sft": {"layout": "messages"}} if fmt == "sft" else {})}))
        m = measured([str(PREP), "pretokenize", "--config", str(config), *executor, "--overwrite", "--json", "-q"], stage, apart, after)
        summary = json.loads(m.stdout)
        report = check_table(under(out, store, f"{fmt}.lance"), text["rows"], summary["tokens"])
        facts[fmt] = {"rows": report["num_rows"], "tokens": report["tokens"]}
        return m, report["tokens"], "token", disk_bytes(*outputs(stage, out)), disk_bytes(text[fmt])
    if stage == "decode-images":
        m = measured([str(PREP), "decode-images", "--input", images["dir"], "--output", under(out, store, "images.lance"),
                      *executor, "--overwrite", "--json", "-q"], stage, apart, after)
        check_table(under(out, store, "images.lance"), images["images"], None)
        return m, images["images"], "image", disk_bytes(*outputs(stage, out)), disk_bytes(images["dir"])
    table = under(out, store, "pretrain.lance")
    if stage.startswith("shuffle-"):
        target = under(out, store, outputs(stage, out)[0].name)
        clump = ["--clump", "64"] if stage == "shuffle-clump64" else []
        remove(target)  # a rerun of the same plan would find every split done
        m = measured([str(PREP), "materialize-shuffle", "--table", table, "--output", target, "--epochs", "1",
                      *clump, *executor, "--overwrite", "-q"], stage, apart, after)
        check_verify(target, facts["pretrain"]["rows"])
        return m, facts["pretrain"]["tokens"], "token", disk_bytes(target), disk_bytes(table)
    m = measured([sys.executable, __file__, "--_read", str(out / "random")], stage)
    got = json.loads(m.stdout.strip().splitlines()[-1])
    want = facts["pretrain"]
    if got["rows"] + got["dropped_rows"] != want["rows"]:
        raise CheckFailed(f"read: {got['rows']:,} rows read + {got['dropped_rows']:,} dropped != {want['rows']:,} table rows")
    if got["tokens"] + got["dropped_tokens"] != want["tokens"]:
        raise CheckFailed(f"read: {got['tokens']:,} tokens read + {got['dropped_tokens']:,} in the dropped rows "
                          f"!= {want['tokens']:,} tokens in the table")
    return m, got["tokens"], "token", 0, disk_bytes(out / "random")


def read_epoch(output: str) -> dict:
    """One epoch read as a trainer reads it (the ``read-epoch`` stage, in its own process); the dropped
    tail's rows and tokens, read from the split datasets after the timed loop."""
    import lance
    import numpy as np
    from torch.utils.data import DataLoader

    from prep.io.materialized import read_manifest
    from prep.reader import ReaderDataset

    ds = ReaderDataset(output, global_batch_size=GLOBAL_BATCH)
    rows = tokens = 0
    for batch in DataLoader(ds, batch_size=None):
        rows += batch.num_rows
        tokens += batch.num_tokens
    manifest, dropped_tokens = read_manifest(output), 0
    for epoch, steps in ds.steps_per_epoch.items():
        starts = ds.share.split_starts(np.array([steps]))[0]
        for split in manifest.epoch(epoch).splits:
            start = int(starts[split.split])
            if split.num_rows > start:
                tail = lance.dataset(f"{output}/{split.path}").to_table(columns=["length"], offset=start,
                                                                       limit=split.num_rows - start)
                dropped_tokens += int(tail["length"].to_numpy().sum())
    return {"rows": rows, "tokens": tokens, "dropped_rows": ds.dropped_rows, "dropped_tokens": dropped_tokens}


# ----------------------------------------------------------------------------- driver
def plan_stages(wanted: list[str]) -> list[str]:
    """The stages to run, in order: the wanted ones and what they need."""
    todo = set(wanted)
    for stage in wanted:
        while stage in NEEDS:
            stage = NEEDS[stage]
            todo.add(stage)
    return [s for s in STAGES if s in todo]


def run_factor(factor: float, work: Path, stages: list[str], wanted: list[str], rows: list[Row]) -> int:
    """Every stage at ``factor``; returns the most disk bytes its inputs and outputs held at once."""
    text, images = text_inputs(work, factor), image_inputs(work, factor)
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    facts: dict = {}
    peak_disk = 0
    for i, stage in enumerate(stages):
        m, units, unit, out_bytes, in_bytes = run_stage(stage, out, text, images, facts)
        peak_disk = max(peak_disk, disk_bytes(work / "inputs" / tag(factor), out))
        later = set(stages[i + 1:])
        for done in stages[:i + 1]:
            if not any(NEEDS.get(s) == done for s in later):
                for path in outputs(done, out):
                    shutil.rmtree(path, ignore_errors=True)
        if stage not in wanted:
            continue
        row = Row(factor=factor, stage=stage, units=units, unit=unit, wall_s=m.wall_s, cpu_s=m.cpu_s,
                  peak_tree_rss=m.peak_tree_rss, peak_process_rss=m.peak_process_rss, out_bytes=out_bytes,
                  input_bytes=in_bytes, cpu_per_unit=m.cpu_s / max(1, units) * (1e6 if unit == "token" else 1e3))
        base = next((r for r in rows if r.stage == stage), row)  # the smallest factor (factors run ascending)
        row.wall_ratio = (row.wall_s / max(1, row.units)) / (base.wall_s / max(1, base.units))
        row.cpu_ratio = (row.cpu_s / max(1, row.units)) / (base.cpu_s / max(1, base.units))
        rows.append(row)
        print(format_row(row), flush=True)
    shutil.rmtree(out, ignore_errors=True)
    return peak_disk


HEADER = (f"{'factor':>7} {'stage':<21} {'units':>14} {'wall s':>8} {'CPU s':>8} {'CPU/unit':>13} "
          f"{'t/unit x':>8} {'cpu x':>6} {'tree MB':>8} {'proc MB':>8} {'out MB':>8}")


def format_row(r: Row) -> str:
    per = f"{r.cpu_per_unit:.2f} us/tok" if r.unit == "token" else f"{r.cpu_per_unit:.1f} ms/img"
    extra = f"  ({r.cpu_s / (r.input_bytes / 1e6):.3f} CPU s/MB in)" if r.unit == "image" else ""
    return (f"{r.factor:>7g} {r.stage:<21} {r.units:>10,} {'tok' if r.unit == 'token' else 'img'} {r.wall_s:>8.1f} {r.cpu_s:>8.1f} {per:>13} "
            f"{r.wall_ratio:>8.2f} {r.cpu_ratio:>6.2f} {r.peak_tree_rss / 2**20:>8.0f} {r.peak_process_rss / 2**20:>8.0f} "
            f"{r.out_bytes / 1e6:>8.1f}{extra}")


def plot(rows: list[Row], path: str) -> None:
    """Time per unit relative to the smallest factor, and peak tree RSS, against the factor, per stage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for stage in dict.fromkeys(r.stage for r in rows):
        mine = [r for r in rows if r.stage == stage]
        left.plot([r.factor for r in mine], [r.wall_ratio for r in mine], "o-", label=stage)
        right.plot([r.factor for r in mine], [r.peak_tree_rss / 2**20 for r in mine], "o-", label=stage)
    left.axhline(1.2, color="grey", ls="--", lw=1, label="goal 1.2x")
    for ax, title in ((left, "wall time per token (image) / smallest factor"), (right, "peak RSS of the process tree, MB")):
        ax.set_xscale("log")
        factors = sorted({r.factor for r in rows})
        ax.set_xticks(factors, [f"{f:g}" for f in factors])
        ax.minorticks_off()
        ax.set_xlabel("factor (1 = GSM8K x16)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factors", default="1,8,64", help="sizes, times GSM8K x16 (floats allowed; default 1,8,64)")
    ap.add_argument("--work", default="/tmp/prep-bench-scale", help="inputs (cached per factor) and outputs")
    ap.add_argument("--stages", default=",".join(STAGES), help=f"a subset of {','.join(STAGES)} (what they need runs too, unreported)")
    ap.add_argument("--plot", help="write the curves to this PNG")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--_read", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._read:
        print(json.dumps(read_epoch(args._read)))
        return 0
    factors = sorted(float(f) for f in args.factors.split(","))
    wanted = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(STAGES))
    if unknown or not factors or min(factors) <= 0:
        ap.error(f"--stages {unknown} not among {list(STAGES)}" if unknown else "--factors must be positive numbers")
    work = work_folder(args.work)
    stages = plan_stages(wanted)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; stages {', '.join(stages)}; work {work}", flush=True)
    rows: list[Row] = []
    disks: list[dict] = []
    per_1x, status = float(BYTES_PER_1X), 0
    try:
        for factor in factors:
            free = shutil.disk_usage(work).free
            need = factor * per_1x - disk_bytes(work / "inputs" / tag(factor))
            print(f"factor {factor:g}: {free / 1e9:.1f} GB free, about {need / 1e9:.2f} GB needed", flush=True)
            if need > free - RESERVE:
                print(f"factor {factor:g} refused: it would need about {need / 1e9:.1f} GB of the {free / 1e9:.1f} GB free "
                      f"(keeping {RESERVE / 2**30:.0f} GiB); run a smaller top factor", file=sys.stderr)
                status = 1
                break
            if not rows:
                print(HEADER, flush=True)
            peak = run_factor(factor, work, stages, wanted, rows)
            disks.append({"factor": factor, "free_before": free, "peak_bytes": peak})
            print(f"factor {factor:g}: inputs and outputs held {peak / 1e9:.2f} GB of disk at most", flush=True)
            per_1x = peak / factor
    except CheckFailed as exc:
        print(f"check failed: {exc}", file=sys.stderr)
        status = 1
    if args.json:
        Path(args.json).write_text(json.dumps({"cpus": os.cpu_count(), "rows": [asdict(r) for r in rows], "disk": disks}, indent=2))
    if args.plot and rows:
        plot(rows, args.plot)
    return status


if __name__ == "__main__":
    sys.exit(main())
