"""Throughput of the synthetic H&E renderer (fedpath.data.synthetic_render).

The reference workload is 4 hospitals x 500 patches at 64 x 64 (target: < 2 s on
a 2-core CPU). Reports the best of ``--repeats`` runs, so that a background process
on a shared machine inflates the figure less.

Usage::

    python benchmarks/bench_synthetic_generation.py [--sizes 32 64 128]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fedpath.data.synthetic_render import make_hospital_profiles, render_patches


def time_workload(num_hospitals: int, per_hospital: int, size: int) -> float:
    """Seconds to render ``per_hospital`` balanced patches for every hospital."""
    labels = np.arange(per_hospital) % 2
    slides = np.arange(per_hospital) // 50
    start = time.perf_counter()
    for profile in make_hospital_profiles(num_hospitals):
        render_patches(labels, profile, size, seed=0, slide_ids=slides)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hospitals", type=int, default=4)
    parser.add_argument("--per-hospital", type=int, default=500)
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    time_workload(1, 16, 64)  # warm-up: imports, allocator
    total = args.hospitals * args.per_hospital
    print(
        f"{args.hospitals} hospitals x {args.per_hospital} patches, best of "
        f"{args.repeats}"
    )
    print(" size   seconds   patches/s   Mpixel/s")
    for size in args.sizes:
        best = min(
            time_workload(args.hospitals, args.per_hospital, size)
            for _ in range(args.repeats)
        )
        print(
            f"{size:5d} {best:9.2f} {total / best:11.0f} "
            f"{total * size * size / best / 1e6:10.1f}"
        )


if __name__ == "__main__":
    main()
