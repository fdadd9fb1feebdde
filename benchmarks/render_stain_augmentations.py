"""Render a PNG grid of the stain augmentations of :mod:`fedpath.stain`.

Rows: a few H&E patches. Columns: original, RandStain (LAB, mean/std + shape),
higher-order only (skewness/kurtosis of a pool entry, mean/std kept), MixStyle
sound mode, MixStyle paper mode (literal Alg. 1), geometric AugMix.

Images come from ``$FEDPATH_AMIBR/patches/*/*.png`` (real 128x128 AMi-Br crops)
when that folder exists, else from the synthetic renderer. The statistics pool is
built from *other* patches than the displayed rows, as a client would receive it.

Usage::

    python benchmarks/render_stain_augmentations.py [out.png] [--rows 6] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from fedpath.report.fig_augment import COLUMNS, augmentations, build_grid
from fedpath.stain import image_statistics, to_space

PATCH_ROOT = Path(os.environ.get("FEDPATH_AMIBR", "amibr-not-set")) / "patches"


def load_patches(n: int, seed: int, root: Path = PATCH_ROOT) -> torch.Tensor:
    """``n`` RGB patches ``(n, 3, H, W)`` in ``[0, 1]`` (real, else synthetic)."""
    files = sorted(root.glob("*/*.png")) if root.is_dir() else []
    if files:
        rng = np.random.default_rng(seed)
        pick = rng.choice(len(files), size=min(n, len(files)), replace=False)
        arrays = [np.asarray(Image.open(files[i]).convert("RGB")) for i in pick]
        sizes = {a.shape for a in arrays}
        side = min(min(s[0], s[1]) for s in sizes)
        batch = np.stack([a[:side, :side] for a in arrays]).transpose(0, 3, 1, 2)
        return torch.from_numpy(batch).float() / 255.0
    from fedpath.data.synthetic_render import make_hospital_profiles, render_patches

    profiles = make_hospital_profiles(4, seed)
    labels = np.arange(n) % 2
    parts = [
        render_patches(labels[i::4], profiles[i], 128, seed)
        for i in range(len(profiles))
    ]
    return torch.from_numpy(np.concatenate(parts)).float() / 255.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "out", nargs="?", default="benchmarks/out/stain_aug.png", type=Path
    )
    parser.add_argument("--rows", type=int, default=6)
    parser.add_argument("--pool", type=int, default=64, help="pool patches")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    images = load_patches(args.rows + args.pool, args.seed)
    rows, pool_images = images[: args.rows], images[args.rows :]
    stats = image_statistics(to_space(rows, "lab"), "moments")
    sheet = build_grid(augmentations(rows, pool_images, args.seed))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(sheet).save(args.out)
    print(f"wrote {args.out} ({sheet.shape[1]}x{sheet.shape[0]}); columns: {COLUMNS}")
    print("row LAB moments (mean, std, skew, exkurt) of channel L:")
    for i, s in enumerate(stats[:, 0].tolist()):
        print(f"  row {i}: " + ", ".join(f"{v:7.2f}" for v in s))


if __name__ == "__main__":
    main()
