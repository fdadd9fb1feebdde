"""Slide pipeline figures: tiling memory and speed, patch reads, MvMidog, features.

Writes a synthetic 50,000 x 50,000 pixel pyramidal TIFF (JPEG tiles, 6 levels)
from a tile generator (pre-encoded tiles, so the writer never holds the image),
then prints:

* tiling: seconds, grid positions scored per second and PEAK RSS of a fresh
  process that tiles the slide (it must stay under 1 GiB);
* patch extraction: 256-px patches per second read at the tiled coordinates, and
  MvMidog builder patches (positives + negatives, PNG written) per second on
  MIDOG-sized synthetic slides;
* feature extraction: patches per second of :func:`extract_features` (reading +
  resizing to 224 px + encoding, batch 32, CPU) for the small CNN and ResNet-50.

Usage::

    python benchmarks/bench_wsi.py [--size 50000] [--workdir DIR] [--keep]

Threads: ``FEDPATH_BENCH_THREADS`` (default 2, see ``_common.setup_threads``).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import h5py
import imagecodecs
import numpy as np
import tifffile
import torch
from _common import setup_threads
from scipy import ndimage

TILE = 256
H_OD = np.array([0.65, 0.70, 0.29], dtype=np.float32)
E_OD = np.array([0.07, 0.99, 0.11], dtype=np.float32)


def he_texture(size: int, seed: int) -> np.ndarray:
    """A uint8 H&E-like tissue texture: pink stroma, purple nuclei (Beer-Lambert)."""
    rng = np.random.default_rng(seed)
    smooth = ndimage.gaussian_filter(rng.random((size, size)), 12)
    smooth = (smooth - smooth.min()) / np.ptp(smooth)
    seeds = (rng.random((size, size)) < 0.004).astype(np.float32)
    nuclei = ndimage.gaussian_filter(seeds, 2.5) > 0.012
    e = 0.25 + 0.25 * smooth
    h = np.where(nuclei, 0.9 + 0.3 * smooth, 0.05)
    od = h[..., None] * H_OD + e[..., None] * E_OD
    rgb = 246.0 * np.exp(-od) + rng.normal(0, 2.0, od.shape)
    return np.clip(rgb, 0, 255).astype(np.uint8)


def tissue_layout(cells_w: int, cells_h: int) -> np.ndarray:
    """Which 256-px cells of level 0 hold tissue: three overlapping ellipses."""
    yy, xx = (
        np.mgrid[0:cells_h, 0:cells_w] / np.array([cells_h, cells_w])[:, None, None]
    )
    blobs = [(0.35, 0.4, 0.25, 0.3), (0.65, 0.6, 0.22, 0.28), (0.5, 0.8, 0.15, 0.1)]
    out = np.zeros((cells_h, cells_w), bool)
    for cx, cy, rx, ry in blobs:
        out |= ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1
    return out


def write_synthetic_slide(
    path: Path, width: int, height: int, levels: int = 6, mpp: float = 0.25
) -> float:
    """Pyramidal JPEG TIFF from pre-encoded tiles; returns the tissue fraction."""
    layout = tissue_layout(-(-width // TILE), -(-height // TILE))
    textures = [he_texture(TILE, s) for s in range(8)]
    tissue_jpeg = [imagecodecs.jpeg8_encode(t, level=85) for t in textures]
    white = np.full((TILE, TILE, 3), 244, np.uint8)
    white_jpeg = imagecodecs.jpeg8_encode(white, level=85)

    def tiles(k: int) -> Iterator[bytes]:
        f = 2**k
        lw, lh = -(-width // f), -(-height // f)
        cell = TILE // f  # pixels of one layout cell at level k
        for ty in range(-(-lh // TILE)):
            for tx in range(-(-lw // TILE)):
                block = layout[ty * f : (ty + 1) * f, tx * f : (tx + 1) * f]
                variant = (tx * 7 + ty * 13) % len(textures)
                if block.size and block.all():
                    yield tissue_jpeg[variant]
                elif not block.any():
                    yield white_jpeg
                else:  # tissue border: render this tile
                    up = np.kron(block, np.ones((cell, cell), bool))
                    img = white.copy()
                    m = np.zeros((TILE, TILE), bool)
                    m[: up.shape[0], : up.shape[1]] = up
                    img[m] = textures[variant][m]
                    yield imagecodecs.jpeg8_encode(img, level=85)

    res = 1e4 / mpp
    with tifffile.TiffWriter(path, bigtiff=True) as tw:
        for k in range(levels):
            f = 2**k
            tw.write(
                tiles(k),
                shape=(-(-height // f), -(-width // f), 3),
                dtype=np.uint8,
                tile=(TILE, TILE),
                compression="jpeg",
                photometric="rgb",
                subfiletype=1 if k else 0,
                resolution=(res / f, res / f),
                resolutionunit="CENTIMETER",
            )
    return float(layout.mean())


def tile_child(slide: str, out: str) -> None:
    """Run in a fresh process: tile the slide, print JSON with time and peak RSS."""
    from fedpath.wsi.tiling import tile_slide

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    n = tile_slide(slide, out, patch_size=256, mask_png=Path(out).with_suffix(".png"))
    sec = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"patches": n, "seconds": sec, "peak": peak, "imports": base}))


def bench_tiling(slide: Path, work: Path, size: int) -> Path:
    out = work / "coords.h5"
    cmd = [sys.executable, __file__, "--tile-child", str(slide), str(out)]
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True).stdout)
    grid = (size // TILE) ** 2
    print(
        f"tiling {size}x{size}: {res['seconds']:.1f} s, {grid / res['seconds']:,.0f} "
        f"grid positions/s, {res['patches']:,} tissue patches kept"
    )
    print(
        f"tiling PEAK RSS: {res['peak']:.0f} MiB (of which {res['imports']:.0f} MiB "
        "is the interpreter with numpy/torch/h5py imported); limit 1024 MiB"
    )
    return out


def bench_patch_reads(slide: Path, coords_h5: Path, n: int = 1500) -> None:
    from fedpath.wsi.slide import open_slide

    with h5py.File(coords_h5) as fh:
        coords = fh["coords"][:]
    pick = coords[np.random.default_rng(0).permutation(len(coords))[:n]]
    with open_slide(slide) as s:
        t0 = time.perf_counter()
        for x, y in pick:
            s.read_region(int(x), int(y), 0, 256, 256)
        sec = time.perf_counter() - t0
    print(
        f"patch extraction at tiled coords: {len(pick) / sec:,.0f} patches/s (256 px)"
    )


def bench_mvmidog(work: Path, slides: int = 2, figures: int = 80) -> None:
    from fedpath.wsi.midog import build_mvmidog

    rng = np.random.default_rng(0)
    w, h = 7168, 5120  # the size of a MIDOG 2021 region
    images, anns = [], []
    for i in range(1, slides + 1):
        write_synthetic_slide(work / f"{i:03d}.tiff", w, h, levels=3)
        images.append({"id": i, "file_name": f"{i:03d}.tiff", "width": w, "height": h})
        layout = tissue_layout(w // TILE, h // TILE)
        cells = np.argwhere(layout)
        for cy, cx in cells[rng.choice(len(cells), figures, replace=False)]:
            x = int(cx * TILE + rng.integers(30, 200))
            y = int(cy * TILE + rng.integers(30, 200))
            box = [x - 25, y - 25, x + 25, y + 25]
            anns.append({"image_id": i, "bbox": box, "category_id": 1})
    js = work / "midog.json"
    js.write_text(json.dumps({"images": images, "annotations": anns}))
    t0 = time.perf_counter()
    rep = build_mvmidog(js, work, work / "mvmidog")
    sec = time.perf_counter() - t0
    n = sum(
        d.get("positives", 0) + d.get("negatives", 0) for d in rep["domains"].values()
    )
    print(
        f"MvMidog builder: {n / sec:,.0f} patches/s ({n} patches of 128 px from "
        f"{slides} slides of {w}x{h}, PNG + manifest, {sec:.1f} s)"
    )


def bench_features(slide: Path, coords_h5: Path, work: Path) -> None:
    from fedpath.wsi.features import extract_features, load_encoder

    with h5py.File(coords_h5) as fh:
        coords, attrs = fh["coords"][:], dict(fh["coords"].attrs)
    for backbone, n in (("small_cnn", 320), ("resnet50", 96)):
        sub = work / f"coords_{backbone}.h5"
        with h5py.File(sub, "w") as fh:
            d = fh.create_dataset("coords", data=coords[:n])
            d.attrs.update(attrs)
        model = load_encoder(backbone)
        with torch.inference_mode():  # warm-up: first-call allocations
            model.encode(torch.rand(8, 3, 224, 224))
        t0 = time.perf_counter()
        extract_features(
            slide,
            sub,
            work / f"f_{backbone}.h5",
            backbone,
            input_size=224,
            batch_size=32,
            model=model,
        )
        sec = time.perf_counter() - t0
        print(
            f"feature extraction {backbone}: {n / sec:,.1f} patches/s "
            f"(256 px read, resized to 224, batch 32, CPU, D={model.feature_dim})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=50_000)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    ap.add_argument("--tile-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tile_child:
        tile_child(*args.tile_child)
        return
    threads = setup_threads()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_wsi_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        slide = work / "big.tif"
        t0 = time.perf_counter()
        frac = write_synthetic_slide(slide, args.size, args.size)
        print(
            f"wrote {args.size}x{args.size} pyramid "
            f"({slide.stat().st_size / 2**20:,.0f} MiB, {frac:.0%} tissue) in "
            f"{time.perf_counter() - t0:.1f} s; "
            f"torch threads {threads}"
        )
        coords = bench_tiling(slide, work, args.size)
        bench_patch_reads(slide, coords)
        bench_mvmidog(work)
        bench_features(slide, coords, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
