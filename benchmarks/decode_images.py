"""Images/s of the decode-images job versus decode + resize alone (the ceiling).

    .venv/bin/python benchmarks/decode_images.py                  # hymenoptera x4 (980 images), 2 CPUs
    .venv/bin/python benchmarks/decode_images.py --copies 1 --cpus 1

The ceiling is the same library doing only the work that cannot be avoided, in one
process on one thread: read the file, ``decode`` (torchvision), ``fit`` (resize +
center crop) to HWC uint8. The job adds listing, Ray Data tasks, Arrow rows, Lance
fragment writes, the rejects table and the commit. Ray start-up and the workers'
first imports (torch, lance) are excluded: the job is timed after a warm-up run in
the same Ray. ``ratio`` is job / ceiling; ``per_core`` divides by the job's CPUs, so
1.0 there means no overhead at all. The machine's CPUs may be shared: run it twice.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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


def ceiling(files: list[Path], size: int) -> float:
    """Images/s of read + decode + fit in this process, one thread."""
    import torch

    from prep.prepare.images.decode import decode
    from prep.prepare.images.transform import Fit, fit

    torch.set_num_threads(1)
    fit_ = Fit(size, size)
    for p in files[:8]:  # warm the codecs
        fit(decode(p.read_bytes()).pixels, fit_)
    t0 = time.perf_counter()
    for p in files:
        fit(decode(p.read_bytes()).pixels, fit_).permute(1, 2, 0).contiguous().numpy()
    return len(files) / (time.perf_counter() - t0)


def pipeline(root: Path, work: Path, size: int, cpus: int, per_chunk: int) -> dict:
    from prep.config import load_config
    from prep.prepare.images.config import ImagesConfig
    from prep.prepare.images.job import run_decode_images
    from prep.ray_runtime import init_ray

    t0 = time.perf_counter()
    init_ray(num_cpus=cpus)
    ray_start = time.perf_counter() - t0
    warm = work / "warm"
    replicate_small = sorted(p for p in root.rglob("*") if p.is_file())[: 4 * cpus]
    for p in replicate_small:
        (warm / p.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, warm / p.parent.name / p.name)
    common = dict(size=size, images_per_chunk=per_chunk, source="imagefolder")
    run_decode_images(load_config(ImagesConfig, None, input=str(warm), output=str(work / "warm.lance"), images_per_chunk=2, size=size))
    summary = run_decode_images(load_config(ImagesConfig, None, input=str(root), output=str(work / "bench.lance"), **common))
    summary["ray_start_s"] = round(ray_start, 2)
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="an ImageFolder tree (default: hymenoptera train)")
    ap.add_argument("--copies", type=int, default=4, help="replicate the tree this many times (default 4)")
    ap.add_argument("--cpus", type=int, default=2, help="Ray CPUs for the job (default 2)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--images-per-chunk", type=int, default=64)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if not args.input.is_dir():
        print(f"input not found: {args.input}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="prep-bench-images-") as tmp:
        work = Path(tmp)
        files = replicate(args.input, work / "tree", args.copies)
        ceil = ceiling(files, args.size)
        job = pipeline(work / "tree", work, args.size, args.cpus, args.images_per_chunk)
    rate = job["rows_read"] / job["seconds"]["job"]
    result = {
        "images": len(files),
        "cpus": args.cpus,
        "machine_cpus": os.cpu_count(),
        "ceiling_images_per_s": round(ceil, 1),
        "job_images_per_s": round(rate, 1),
        "ratio": round(rate / ceil, 2),
        "per_core": round(rate / (ceil * args.cpus), 2),
        "bytes_per_image": job["bytes_per_image"],
        "pixel_bytes_per_image": args.size * args.size * 3,
        "job_seconds": job["seconds"]["job"],
        "ray_start_s": job["ray_start_s"],
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps(result))
    else:
        r = result
        print(f"{r['images']} images, {args.size}x{args.size} RGB, {r['cpus']} Ray CPUs of {r['machine_cpus']} (load avg {r['load_average_1m']})")
        print(f"  ceiling (decode+resize, 1 process, 1 thread): {r['ceiling_images_per_s']:,} images/s")
        print(f"  job (Ray Data -> Lance, warm workers):        {r['job_images_per_s']:,} images/s in {r['job_seconds']}s")
        print(f"  ratio job/ceiling: {r['ratio']}  (per Ray CPU: {r['per_core']})")
        print(f"  bytes written per image: {r['bytes_per_image']:,} (pixels alone {r['pixel_bytes_per_image']:,})")
        print(f"  Ray start-up, excluded: {r['ray_start_s']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
