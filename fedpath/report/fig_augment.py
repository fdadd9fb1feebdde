"""What FedStain's augmentations do to a few real patches (the report's and
``benchmarks/render_stain_augmentations.py``'s sheet).

Columns: original, RandStain (LAB, mean/std + shape), higher-order only
(skewness/kurtosis of a pool entry, mean/std kept), MixStyle sound mode,
MixStyle paper mode (literal Alg. 1), geometric AugMix. The statistics pool is
built from *other* patches than the displayed rows, as a client receives it.
"""

from __future__ import annotations

import numpy as np
import torch

from fedpath.stain import StatPool, augmix, mixstyle, randstain, restyle, to_space
from fedpath.stain.color import from_space

COLUMNS = (
    "original",
    "RandStain",
    "higher-order only",
    "MixStyle sound",
    "MixStyle paper",
    "AugMix",
)


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


def augmentation_png(x: torch.Tensor, pool_images: torch.Tensor, seed: int) -> bytes:
    """The sheet of :func:`augmentations` for float images ``x`` in [0, 1], with
    the column names above it, as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedpath.report.html import fig_png

    sheet = build_grid(augmentations(x, pool_images, seed))
    fig, ax = plt.subplots(figsize=(sheet.shape[1] / 80, sheet.shape[0] / 80 + 0.4))
    ax.imshow(sheet)
    ax.axis("off")
    step = sheet.shape[1] / len(COLUMNS)
    for j, name in enumerate(COLUMNS):
        ax.text(step * (j + 0.5), -4, name, ha="center", va="bottom", fontsize=8)
    fig.tight_layout()
    return fig_png(fig)
