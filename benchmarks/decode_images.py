"""Images/s of the decode-images job versus decode + resize alone (the ceiling).

    .venv/bin/python benchmarks/decode_images.py                  # hymenoptera x4 (980 images), 2 CPUs
    .venv/bin/python benchmarks/decode_images.py --copies 1 --cpus 1

The ceiling is the same library doing only the work that cannot be avoided, in one
process on one thread: read the file, ``torchvision.io.decode_image``, ``resize``
(shorter side) + ``center_crop``, HWC uint8. The job adds listing, the header check
(format by content, pixel limit), labels and ids, Ray Data tasks, Arrow rows, Lance
fragment writes, the rejects table and the commit, with ``--executor local`` (this
machine's CPUs, the default on one machine) or ``ray`` (a local Ray, as on a cluster;
its start-up and its workers' first imports are excluded: the job is timed after a
warm-up run in the same Ray; the local executor starts its sandboxes in every job).
``ratio`` is job / ceiling; ``per_core`` divides by the job's CPUs, so
1.0 there means no overhead at all. Each side runs ``--repeat`` times, ceiling
passes alternating with job runs so both see the same load; the median of the paired
ratios is reported. The machine's CPUs may be shared, so the load average is printed,
and so is the CPU time each side spent per image (this process and all its Ray
processes), which other users of the machine do not change: ``cpu_ratio`` is the
ceiling's CPU per image over the job's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_INPUT = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "hymenoptera" / "train"


def replicate(src: Path, dst: Path, copies: int) -> list[Path]:
    """``copies`` copies of an ImageFolder tree under ``dst`` (classes kept: ``<class>/<copy>-<name>``)."""
    files = sorted(p for p in src.rglob("*") if p.is_file() and not p.name.startswith("."))
    out = []
    for k in range(copies):
        for p in files:
            target = dst / p.relative_to(src).parent / f"{k}-{p.name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, target)
            out.append(target)
    return sorted(out)


def ceiling_pass(files: list[Path], size: int) -> float:
    """Images/s of plain torchvision over ``files`` in this process, one thread: read the
    file, ``decode_image`` (RGB, EXIF), ``resize`` (shorter side, antialiased bilinear),
    ``center_crop``, HWC. No header check, no labels, no Arrow, no Lance, no Ray."""
    import torch
    from torchvision.io import ImageReadMode, decode_image
    from torchvision.transforms.v2 import functional as F

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    for p in files:
        img = decode_image(torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8), mode=ImageReadMode.RGB, apply_exif_orientation=True)
        img = img[0] if img.ndim == 4 else img
        F.center_crop(F.resize(img, [size], antialias=True), [size, size]).permute(1, 2, 0).contiguous().numpy()
    return len(files) / (time.perf_counter() - t0)


def ray_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and all its descendants: the driver,
    the local Ray's GCS and raylet, and its workers. Unlike wall time, this does not
    depend on what else the machine is running."""
    import psutil

    me = psutil.Process()
    own = me.cpu_times()
    total = own.children_user + own.children_system  # children already gone: the local executor's sandboxes
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def measure(root: Path, files: list[Path], work: Path, args: argparse.Namespace) -> tuple[list[float], list[dict], float, float, tuple]:
    """Alternates ceiling passes and job runs (so both see the same load).

    Returns the ceiling rates, the job summaries, Ray's start time, the time of a
    one-chunk job of a few images (the job's fixed cost: Ray Data start-up, commit),
    and the CPU seconds each side used per run.
    """
    from prep.runtime.config import load_config
    from prep.prepare.images.config import ImagesConfig
    from prep.prepare.images.job import run_decode_images
    from prep.runtime.ray_cluster import init_ray

    t0 = time.perf_counter()
    if args.executor == "ray":
        init_ray(num_cpus=args.cpus)
    ray_start = time.perf_counter() - t0
    common = dict(size=args.size, executor=args.executor, ray={"num_cpus": args.cpus})
    warm = work / "warm"  # workers import torch/lance on their first task: not part of the steady state
    for p in files[: 4 * args.cpus]:
        (warm / p.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, warm / p.parent.name / p.name)
    run_decode_images(load_config(ImagesConfig, None, input=str(warm), output=str(work / "warm.lance"), images_per_chunk=2, **common))
    ceiling_pass(files[:8], args.size)  # warm the codecs
    tiny = run_decode_images(load_config(ImagesConfig, None, input=str(warm), output=str(work / "tiny.lance"), images_per_chunk=4 * args.cpus, **common))
    ceils, runs, cpu_ceiling, cpu_job = [], [], [], []
    for k in range(args.repeat):
        cpu0 = time.process_time()
        ceils.append(ceiling_pass(files, args.size))
        cpu_ceiling.append(time.process_time() - cpu0)
        cpu0 = ray_cpu_seconds()
        cfg = load_config(ImagesConfig, None, input=str(root), output=str(work / f"bench-{k}.lance"), images_per_chunk=args.images_per_chunk, source="imagefolder", **common)
        runs.append(run_decode_images(cfg))
        cpu_job.append(ray_cpu_seconds() - cpu0)
    return ceils, runs, ray_start, tiny["seconds"]["job"], (cpu_ceiling, cpu_job)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="an ImageFolder tree (default: hymenoptera train)")
    ap.add_argument("--copies", type=int, default=4, help="replicate the tree this many times (default 4)")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs (workers) for the job (default 2)")
    ap.add_argument("--executor", choices=["local", "ray"], default="local",
                    help="local (default: what a one-machine run uses) or ray (a local Ray, as on a cluster)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--images-per-chunk", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each side; medians are reported (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if not args.input.is_dir():
        print(f"input not found: {args.input}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="prep-bench-images-") as tmp:
        work = Path(tmp)
        files = replicate(args.input, work / "tree", args.copies)
        ceils, runs, ray_start, fixed, (cpu_ceiling, cpu_job) = measure(work / "tree", files, work, args)
    rates = [r["rows_read"] / r["seconds"]["job"] for r in runs]
    ratios = [r / c for r, c in zip(rates, ceils)]
    ceil, rate, ratio = statistics.median(ceils), statistics.median(rates), statistics.median(ratios)
    job = runs[0]
    result = {
        "images": len(files),
        "cpus": args.cpus,
        "machine_cpus": os.cpu_count(),
        "ceiling_images_per_s": round(ceil, 1),
        "job_images_per_s": round(rate, 1),
        "ceiling_runs": [round(x, 1) for x in ceils],
        "job_runs": [round(x, 1) for x in rates],
        "ratio": round(ratio, 2),
        "ratio_runs": [round(x, 2) for x in ratios],
        "per_core": round(ratio / args.cpus, 2),
        "cpu_ms_per_image_ceiling": round(1e3 * statistics.median(cpu_ceiling) / len(files), 2),
        "cpu_ms_per_image_job": round(1e3 * statistics.median(cpu_job) / len(files), 2),
        "cpu_ratio": round(statistics.median(cpu_ceiling) / statistics.median(cpu_job), 2),
        "bytes_per_image": job["bytes_per_image"],
        "pixel_bytes_per_image": args.size * args.size * 3,
        "ray_start_s": round(ray_start, 2),
        "fixed_per_job_s": round(fixed, 2),
        "ratio_without_fixed": round(statistics.median(
            [len(files) / max(r["seconds"]["job"] - fixed, 1e-9) / c for r, c in zip(runs, ceils)]), 2),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps(result))
    else:
        r = result
        print(f"{r['images']} images, {args.size}x{args.size} RGB, executor {args.executor}, {r['cpus']} CPUs of {r['machine_cpus']} (load avg {r['load_average_1m']})")
        print(f"  ceiling (decode+resize, 1 process, 1 thread): {r['ceiling_images_per_s']:,} images/s (median of {r['ceiling_runs']})")
        print(f"  job (-> Lance; after a warm-up job):          {r['job_images_per_s']:,} images/s (median of {r['job_runs']})")
        print(f"  ratio job/ceiling: {r['ratio']}  (median of paired runs {r['ratio_runs']}; per Ray CPU: {r['per_core']})")
        print(f"  CPU per image (every process of the job): ceiling {r['cpu_ms_per_image_ceiling']} ms, job {r['cpu_ms_per_image_job']} ms"
              f" -> CPU ratio {r['cpu_ratio']} (load-independent)")
        print(f"  bytes written per image: {r['bytes_per_image']:,} (pixels alone {r['pixel_bytes_per_image']:,})")
        print(f"  Ray start-up, excluded: {r['ray_start_s']}s; fixed cost per job (a one-chunk job): {r['fixed_per_job_s']}s")
        print(f"  ratio without that fixed cost (a large job's steady state): {r['ratio_without_fixed']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
