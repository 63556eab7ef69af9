"""Does a training step ever wait for data? prep's loaders under a simulated trainer (issue 19).

Throughput on bare batches is not what a GPU feels. Here a consumer simulates a training step:
for ``--gil`` of each step it runs Python (it competes for the GIL as a model's Python code and
kernel launches do), for the rest it sleeps (the GIL released, as while the GPU runs the step's
kernels). The time it spends in ``next(batches)`` is time the step waited for data. Each case runs
in a fresh process; reported per case:

    first s   what the first batch adds to the trainer's start: from building the loader to the
              first batch, less the ``--setup`` seconds the trainer spent between the two (building
              its model, holding the GIL); worker processes' start-up included (``hf``: from asking
              the built Trainer for its train dataloader)
    ramp ms   what the ``--ramp`` steps after the first waited in all (the pipeline filling up)
    wait %    waiting over all step time, for the steps after those
    p99 ms    the 99th percentile of one step's wait there (max ms: the longest)
    here      with workers: the batches read in the trainer's process while they started (``Loader``
              reads the first steps itself and hands over to them, :mod:`prep.reader.workers.handoff`)

Profiles (the issue's rates; text rows are GSM8K x16 pretrain rows of <= 512 tokens, 193 on average):

    sft-32     G=32, a step every 100 ms
    sft-256    G=256, a step every 500 ms
    sft-256f   G=256, a step every 100 ms (the fast corner: 0.5 M tokens/s)
    img-256    G=256 images of 224x224x3 (150 KB each) at 150 MB/s: a step every 257 ms

Loaders (how a user's training loop gets the batches):

    loader     prep.reader.Loader(ds, num_workers=n): shared-memory shipments from workers
    torch      torch DataLoader(ds, batch_size=None, num_workers=n): what a framework builds
    hf         the loader prep's HF Trainer integration gives Trainer (ReaderTrainerMixin, built
               through a real Trainer with dataloader_num_workers=n)

Sources: ``mat`` the epoch written by materialize-shuffle (32 splits); ``plan`` the prepared table
read with an on-the-fly random plan (32 splits); ``cache`` the materialized epoch through
``cache_dir``, empty at the start (the first epoch fills it while it is read).

    python benchmarks/feed.py                                   # the default matrix (about 20 min)
    python benchmarks/feed.py --profiles sft-256f --loaders loader --workers 0,1,2 --sources mat
    python benchmarks/feed.py --gil 0.5 --steps 40
    python benchmarks/feed.py --setup 3                         # the trainer builds its model for 3 s first

The machine's CPUs may be shared: the load average is printed beside each case. The inputs are
built once in ``--work`` (the text ones as ``benchmarks/reader.py`` builds them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reader import PREP, SHARED, SPLITS, build

IMAGE_BYTES = 224 * 224 * 3


@dataclass(frozen=True)
class Profile:
    """A simulated training step: ``rows`` a global batch, one every ``step_s`` seconds."""

    rows: int
    step_s: float
    images: bool = False


PROFILES = {"sft-32": Profile(32, 0.100), "sft-256": Profile(256, 0.500), "sft-256f": Profile(256, 0.100),
            "img-256": Profile(256, 256 * IMAGE_BYTES / 150e6, images=True)}
LOADERS = ("loader", "torch", "hf")
SOURCES = ("mat", "plan", "cache")


# ----------------------------------------------------------------------------- inputs
def build_images(work: Path, copies: int = 8) -> None:
    """``copies`` x the hymenoptera train photos, decoded at 224, materialized as 4 epochs of 32 splits (cached)."""
    if (work / "img-epochs" / "manifest.json").exists():
        return
    src, tree = SHARED / "hymenoptera" / "train", work / "img-in"
    for photo in sorted(p for p in src.rglob("*") if p.is_file()):
        for k in range(copies):
            target = tree / photo.parent.name / f"{k}-{photo.name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                os.link(photo, target)
    env = {**os.environ, "RAY_DISABLE_USAGE_STATS": "1"}
    subprocess.run([str(PREP), "decode-images", "--input", str(tree), "--output", str(work / "images.lance"),
                    "--size", "224", "--overwrite"], check=True, env=env)
    subprocess.run([str(PREP), "materialize-shuffle", "--table", str(work / "images.lance"), "--output",
                    str(work / "img-epochs"), "--epochs", "4", "--splits", str(SPLITS), "--overwrite"], check=True, env=env)


# ----------------------------------------------------------------------------- one case, in its own process
def batches_opener(profile: Profile, loader: str, source: str, workers: int, work: Path, scratch: str):
    """A function that opens the iterator the training loop runs over, built as a user would build it.

    For ``hf`` the Trainer itself (seconds of transformers' set-up, no data) is built here, before the
    clock starts; the function then asks it for its train dataloader.
    """
    if loader == "hf":
        trainer = _hf_trainer(profile, source, workers, work, scratch)

        def hf_batches():
            hf_loader = trainer.get_train_dataloader()
            return iter(hf_loader), len(hf_loader)
        return hf_batches
    return lambda: open_batches(profile, loader, source, workers, work, scratch)


def _dataset(profile: Profile, source: str, work: Path, scratch: str):
    from prep.reader import ReaderDataset

    if profile.images:
        path, plan = (str(work / "images.lance"), {"num_splits": SPLITS}) if source == "plan" else (str(work / "img-epochs"), None)
    else:
        path, plan = (str(work / "table.lance"), {"num_splits": SPLITS}) if source == "plan" else (str(work / "epochs"), None)
    cache = {"cache_dir": os.path.join(scratch, "cache")} if source == "cache" else {}
    return ReaderDataset(path, global_batch_size=profile.rows, plan=plan, **cache)


def _hf_trainer(profile: Profile, source: str, workers: int, work: Path, scratch: str):
    import torch
    from transformers import Trainer, TrainingArguments

    from prep.integrations.hf import ReaderTrainerMixin

    class FedTrainer(ReaderTrainerMixin, Trainer):
        pass

    args = TrainingArguments(output_dir=os.path.join(scratch, "trainer"), dataloader_num_workers=workers,
                             report_to=[], use_cpu=True)
    return FedTrainer(model=torch.nn.Linear(1, 1), args=args, train_dataset=_dataset(profile, source, work, scratch))


def open_batches(profile: Profile, loader: str, source: str, workers: int, work: Path, scratch: str):
    """The iterator of a ``loader`` or ``torch`` case, and its length."""
    from torch.utils.data import DataLoader

    from prep.reader import Loader

    ds = _dataset(profile, source, work, scratch)
    if loader == "torch":
        return iter(DataLoader(ds, batch_size=None, num_workers=workers,
                               multiprocessing_context="forkserver" if workers else None)), len(ds)
    return iter(Loader(ds, num_workers=workers)), len(ds)


def hold_gil(seconds: float) -> None:
    """Python work for ``seconds`` (a model's Python: it takes the GIL as any Python thread does)."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def run_case(profile: Profile, loader: str, source: str, workers: int, work: Path, steps: int, gil: float,
             setup: float, ramp: int) -> dict:
    import torch  # noqa: F401  (imports are not reading: done before the clock)

    import prep.reader  # noqa: F401

    if loader == "hf":
        import transformers  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="prep-feed-") as scratch:
        opener = batches_opener(profile, loader, source, workers, work, scratch)
        started = time.perf_counter()
        batches, available = opener()
        hold_gil(setup - (time.perf_counter() - started))
        here = next(batches).stats is None  # built in this process (a worker's batch carries its counters)
        first = max(0.0, time.perf_counter() - started - setup)
        waits, rows = [], 0
        for _ in range(min(ramp + steps, available - 1)):
            hold_gil(profile.step_s * gil)
            time.sleep(profile.step_s * (1 - gil))
            t = time.perf_counter()
            batch = next(batches)
            waits.append(time.perf_counter() - t)
            rows += batch.num_rows
            here += batch.stats is None
        del batches
    w = np.array(waits[ramp:])
    return {"first_s": first, "ramp_ms": sum(waits[:ramp]) * 1e3, "steps": len(w),
            "wait_share": float(w.sum() / (w.sum() + len(w) * profile.step_s)),
            "p99_ms": float(np.percentile(w, 99) * 1e3), "max_ms": float(w.max() * 1e3), "rows": rows,
            "here": int(here) if workers else None}


# ----------------------------------------------------------------------------- driver
def measure(case: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--work", args.work, "--steps", str(args.steps), "--gil", str(args.gil),
           "--setup", str(args.setup), "--ramp", str(args.ramp), "--_case", case]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{case} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(line[7:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default="/tmp/prep-bench-feed", help="where the inputs are built (cached)")
    p.add_argument("--profiles", default="sft-32,sft-256,sft-256f,img-256", help=f"of {','.join(PROFILES)}")
    p.add_argument("--loaders", default=",".join(LOADERS), help=f"of {','.join(LOADERS)}")
    p.add_argument("--sources", default="mat,plan", help=f"of {','.join(SOURCES)} (default mat,plan)")
    p.add_argument("--workers", default="0,1,2", help="worker processes (default 0,1,2)")
    p.add_argument("--ramp", type=int, default=4, help="steps after the first reported apart, as ramp ms (default 4)")
    p.add_argument("--steps", type=int, default=40, help="steps timed after those (default 40)")
    p.add_argument("--gil", type=float, default=0.3, help="share of a step that holds the GIL (default 0.3)")
    p.add_argument("--setup", type=float, default=0.0,
                   help="seconds the trainer spends between building the loader and its first batch (default 0)")
    p.add_argument("--_case", help=argparse.SUPPRESS)
    args = p.parse_args()
    work = Path(args.work)
    if args._case:
        name, loader, source, workers = args._case.split(":")
        result = run_case(PROFILES[name], loader, source, int(workers), work, args.steps, args.gil, args.setup, args.ramp)
        print("RESULT " + json.dumps(result))
        return
    profiles = args.profiles.split(",")
    if any(not PROFILES[n].images for n in profiles):
        build(work)
    if any(PROFILES[n].images for n in profiles):
        build_images(work)
    print(f"{os.cpu_count()} CPUs; {args.steps} steps timed after the first {1 + args.ramp}; the step holds the GIL "
          f"{args.gil:.0%} of its time; {args.setup:g} s of trainer setup before the first batch", flush=True)
    print(f"{'profile':<9} {'loader':<7} {'source':<6} {'workers':>7} {'first s':>8} {'ramp ms':>8} {'wait %':>7} "
          f"{'p99 ms':>7} {'max ms':>7} {'here':>5}  load", flush=True)
    for name in profiles:
        for source in args.sources.split(","):
            for loader in args.loaders.split(","):
                for workers in [int(w) for w in args.workers.split(",")]:
                    if loader == "hf" and workers == 0 and "loader" in args.loaders:
                        continue  # the same Loader(num_workers=0) as the loader case
                    r = measure(f"{name}:{loader}:{source}:{workers}", args)
                    print(f"{name:<9} {loader:<7} {source:<6} {workers:>7} {r['first_s']:8.2f} {r['ramp_ms']:8.1f} "
                          f"{r['wait_share'] * 100:7.2f} {r['p99_ms']:7.1f} {r['max_ms']:7.1f} "
                          f"{'-' if r['here'] is None else r['here']:>5}  "
                          f"{os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
