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

from fedpath.stain import (
    StatPool,
    augmix,
    image_statistics,
    mixstyle,
    randstain,
    restyle,
    to_space,
)
from fedpath.stain.color import from_space

PATCH_ROOT = Path(os.environ.get("FEDPATH_AMIBR", "amibr-not-set")) / "patches"
COLUMNS = (
    "original",
    "RandStain",
    "higher-order only",
    "MixStyle sound",
    "MixStyle paper",
    "AugMix",
)


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


def augmentations(
    x: torch.Tensor, pool_images: torch.Tensor, seed: int
) -> list[torch.Tensor]:
    """The grid's columns for the row images ``x``."""
    lab_pool = StatPool.from_images(pool_images, "lab")
    rgb_pool = StatPool.from_images(pool_images, "rgb")
    g = torch.Generator().manual_seed(seed)
    rand_stain = randstain(x, lab_pool, g, p=1.0)
    # Higher-order only: skewness/kurtosis of a random pool entry, own mean/std kept.
    g = torch.Generator().manual_seed(seed + 1)
    lab = to_space(x, "lab")
    entries = lab_pool.sample(x.shape[0], g, mode="direct")
    shaped = restyle(lab, None, entries[..., 2:], "skew_kurt")
    higher_only = from_space(shaped, "lab")
    g = torch.Generator().manual_seed(seed + 2)
    # alpha = 0.5 shows the mixing more clearly than the training default 0.1,
    # whose lambda is almost always ~0 or ~1.
    mix_sound = mixstyle(x, rgb_pool, g, alpha=0.5, mode="sound")
    g = torch.Generator().manual_seed(seed + 2)
    mix_paper = mixstyle(x, rgb_pool, g, alpha=0.5, mode="paper")
    g = torch.Generator().manual_seed(seed + 3)
    aug = augmix(x, g)
    return [x, rand_stain, higher_only, mix_sound, mix_paper, aug]


def build_grid(columns: list[torch.Tensor], gap: int = 4) -> np.ndarray:
    """``(H, W, 3)`` uint8 sheet, one column per tensor, one row per image."""
    n, _, h, w = columns[0].shape
    sheet = np.full(
        (n * (h + gap) + gap, len(columns) * (w + gap) + gap, 3), 255, dtype=np.uint8
    )
    for j, col in enumerate(columns):
        imgs = (col.clamp(0, 1) * 255).round().byte().permute(0, 2, 3, 1).numpy()
        for i in range(n):
            y, x = gap + i * (h + gap), gap + j * (w + gap)
            sheet[y : y + h, x : x + w] = imgs[i]
    return sheet


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
