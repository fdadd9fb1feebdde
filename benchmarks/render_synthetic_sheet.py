"""Write a contact sheet of synthetic H&E patches: one row per hospital.

Each row shows ``--per-class`` normal patches, a gap, then as many tumour patches.

Usage::

    python benchmarks/render_synthetic_sheet.py [out.png] [--hospitals 4]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

from fedpath.data.synthetic_render import make_hospital_profiles, render_patches


def build_sheet(
    num_hospitals: int, per_class: int, image_size: int, scale: int, seed: int
) -> np.ndarray:
    """Return an (H, W, 3) uint8 sheet; rows = hospitals, columns = patches."""
    gap = 4
    labels = np.array([0] * per_class + [1] * per_class)
    # Spread the patches over a few slides so the per-slide jitter shows up.
    slides = np.arange(len(labels)) % 3
    tile = image_size * scale
    width = 2 * per_class * (tile + gap) + 3 * gap
    height = num_hospitals * (tile + gap) + gap
    sheet = np.full((height, width, 3), 255, dtype=np.uint8)
    for row, profile in enumerate(make_hospital_profiles(num_hospitals, seed=seed)):
        images = render_patches(
            labels, profile, image_size, seed=seed, slide_ids=slides
        )
        for col, img in enumerate(images):
            big = img.transpose(1, 2, 0).repeat(scale, axis=0).repeat(scale, axis=1)
            y = gap + row * (tile + gap)
            x = gap + col * (tile + gap) + (3 * gap if col >= per_class else 0)
            sheet[y : y + tile, x : x + tile] = big
    return sheet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "out", nargs="?", default="benchmarks/out/synthetic_sheet.png", type=Path
    )
    parser.add_argument("--hospitals", type=int, default=4)
    parser.add_argument("--per-class", type=int, default=4)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--scale", type=int, default=2, help="pixel repeat factor")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sheet = build_sheet(
        args.hospitals, args.per_class, args.image_size, args.scale, args.seed
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(sheet).save(args.out)
    print(f"wrote {args.out} ({sheet.shape[1]}x{sheet.shape[0]})")


if __name__ == "__main__":
    main()
