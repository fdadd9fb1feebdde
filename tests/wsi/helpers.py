"""Generated H&E-like slides shared by the slide tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tifffile
from scipy import ndimage

H_OD = np.array([0.65, 0.70, 0.29], dtype=np.float32)  # haematoxylin (Ruifrok)
E_OD = np.array([0.07, 0.99, 0.11], dtype=np.float32)  # eosin


def tissue_edge(width: int, height: int) -> np.ndarray:
    """x of the tissue/background boundary per row: tissue left of it."""
    y = np.arange(height)
    return 0.65 * width + 0.05 * width * np.sin(2 * np.pi * y / height)


def he_image(
    width: int,
    height: int,
    seed: int = 0,
    figures: list[tuple[int, int]] | None = None,
) -> np.ndarray:
    """Synthetic H&E: pink stroma, purple nuclei, white background on the right.

    ``figures``: centres of dark, dense 'mitotic figures' (drawn in any region).
    """
    rng = np.random.default_rng(seed)
    xx = np.arange(width, dtype=np.float32)[None, :]
    tissue = xx < tissue_edge(width, height).astype(np.float32)[:, None]
    low = rng.random((height // 32 + 2, width // 32 + 2), dtype=np.float32)
    smooth = ndimage.zoom(low, 32, order=1)[:height, :width]
    seeds = (rng.random((height, width), dtype=np.float32) < 0.004).astype(np.float32)
    nuclei = ndimage.gaussian_filter(seeds, 2.5) > 0.012
    e = np.where(tissue, 0.25 + 0.25 * smooth, np.float32(0))
    h = np.where(tissue & nuclei, 0.9 + 0.3 * smooth, 0.05 * tissue.astype(np.float32))
    for cx, cy in figures or []:  # an ellipse drawn in a window around the centre
        y0, x0 = max(cy - 12, 0), max(cx - 16, 0)
        wy, wx = np.ogrid[y0 : cy + 12, x0 : cx + 16]
        blob = (wx - cx) ** 2 / 14**2 + (wy - cy) ** 2 / 9**2 <= 1.0
        h[y0 : cy + 12, x0 : cx + 16][blob] = 1.8
        e[y0 : cy + 12, x0 : cx + 16][blob] = 0.3
    od = h[..., None] * H_OD + e[..., None] * E_OD
    noise = rng.standard_normal(od.shape, dtype=np.float32) * 2.0
    rgb = 246.0 * np.exp(-od) + noise
    return np.clip(rgb, 0, 255).astype(np.uint8)


def block_mean(arr: np.ndarray, k: int) -> np.ndarray:
    h, w = arr.shape[0] // k * k, arr.shape[1] // k * k
    blocks = arr[:h, :w].reshape(h // k, k, w // k, k, 3).astype(np.float32)
    return np.rint(blocks.mean(axis=(1, 3))).astype(np.uint8)


def write_slide(
    path: Path, level0: np.ndarray, levels: int = 3, mpp: float = 0.25
) -> list[np.ndarray]:
    """Tiled pyramidal TIFF (reduced-resolution pages), lossless; returns levels."""
    arrays = [level0] + [block_mean(level0, 2**i) for i in range(1, levels)]
    res = (1e4 / mpp, 1e4 / mpp)
    with tifffile.TiffWriter(path) as tw:
        for i, arr in enumerate(arrays):
            tw.write(
                arr,
                tile=(256, 256),
                compression="zlib",
                photometric="rgb",
                subfiletype=1 if i else 0,
                resolution=(res[0] / 2**i, res[1] / 2**i),
                resolutionunit="CENTIMETER",
            )
    return arrays
