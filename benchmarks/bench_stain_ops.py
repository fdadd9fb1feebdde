"""Time every op of :mod:`fedpath.stain` on 32x3x64x64 and 32x3x128x128 batches.

Inputs are synthetic H&E patches (so the statistics are realistic); the pools hold
the statistics of 64 other patches. Each op is timed ``--repeats`` times after one
warm-up call and the median is printed in milliseconds per batch.

Usage::

    python benchmarks/bench_stain_ops.py [--repeats 5] [--device cpu]

Threads: ``FEDPATH_BENCH_THREADS`` (default 2, see ``_common.setup_threads``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from _common import setup_threads

from fedpath.data.synthetic_render import make_hospital_profiles, render_patches
from fedpath.stain import (
    STAT_KINDS,
    StatPool,
    augmix,
    channel_moments,
    from_space,
    image_statistics,
    match_shape,
    mixstyle,
    mixstyle_features,
    randstain,
    to_space,
)


def patches(n: int, size: int, seed: int = 0) -> torch.Tensor:
    profiles = make_hospital_profiles(4, seed)
    labels = np.arange(n) % 2
    parts = [
        render_patches(labels[i::4], p, size, seed) for i, p in enumerate(profiles)
    ]
    return torch.from_numpy(np.concatenate(parts)).float() / 255.0


def median_ms(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def ops(
    x: torch.Tensor, others: torch.Tensor
) -> list[tuple[str, Callable[[], object]]]:
    lab_pool = StatPool.from_images(others, "lab")
    rgb_pool = StatPool.from_images(others, "rgb")
    g = torch.Generator().manual_seed(0)
    lab = to_space(x, "lab")
    hed = to_space(x, "hed")
    z = (lab - lab.mean((2, 3), keepdim=True)) / lab.std((2, 3), keepdim=True)
    ts = torch.full(x.shape[:2], 0.5, device=x.device)
    tk = torch.full(x.shape[:2], 1.0, device=x.device)
    table: list[tuple[str, Callable[[], object]]] = [
        ("to_space lab", lambda: to_space(x, "lab")),
        ("from_space lab", lambda: from_space(lab, "lab")),
        ("to_space hed", lambda: to_space(x, "hed")),
        ("from_space hed", lambda: from_space(hed, "hed")),
        ("channel_moments", lambda: channel_moments(x)),
    ]
    for kind in STAT_KINDS:
        if kind != "moments":
            table.append(
                (f"image_statistics {kind}", lambda k=kind: image_statistics(x, k))
            )
    table += [
        ("match_shape (8 iters)", lambda: match_shape(z, ts, tk)),
        ("randstain lab p=1 higher", lambda: randstain(x, lab_pool, g, p=1.0)),
        (
            "randstain lab p=1 mean/std",
            lambda: randstain(x, lab_pool, g, p=1.0, higher_order=False),
        ),
        ("mixstyle rgb sound", lambda: mixstyle(x, rgb_pool, g)),
        ("mixstyle rgb paper", lambda: mixstyle(x, rgb_pool, g, mode="paper")),
        ("mixstyle_features p=1", lambda: mixstyle_features(x, g, p=1.0)),
        (
            "mixstyle_features higher",
            lambda: mixstyle_features(x, g, p=1.0, higher_order=True),
        ),
        ("augmix", lambda: augmix(x, g)),
    ]
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    threads = setup_threads()
    device = torch.device(args.device)
    sizes = (64, 128)
    results: dict[str, list[float]] = {}
    for size in sizes:
        batch = patches(32 + 64, size)
        x, others = batch[:32].to(device), batch[32:].to(device)
        for name, fn in ops(x, others):
            results.setdefault(name, []).append(median_ms(fn, args.repeats, device))
    print(f"fedpath.stain ops, batch 32x3xSxS, device={device}, threads={threads}")
    print(f"{'op':32s}" + "".join(f"{f'S={s} (ms)':>14s}" for s in sizes))
    for name, ms in results.items():
        print(f"{name:32s}" + "".join(f"{v:14.1f}" for v in ms))


if __name__ == "__main__":
    main()
