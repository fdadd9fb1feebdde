"""The patch quality filter: rejects background, flat and colourless crops.

FedStain (Sec. V-A) keeps a crop as a training patch only if it holds enough
stained tissue with structure; :func:`reject_reason` names the first test a crop
fails (one of :data:`QUALITY_REASONS`) so that builders can count each reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from fedpath.wsi.tissue import saturation

#: What :func:`reject_reason` returns for a rejected crop, in the order tested.
QUALITY_REASONS = ("background", "flat", "colourless")


@dataclass(frozen=True)
class QualityThresholds:
    """When a crop is too empty to be a training patch (FedStain Sec. V-A filter).

    ``min_nonwhite``: fraction of pixels that are not near-white (some channel
    below ``white_level``). ``min_edge``: mean Sobel gradient magnitude of the
    grey image (grey levels per pixel; blurred or flat crops score low).
    ``min_saturation_std``: standard deviation of HSV saturation (0-255); H&E
    crops mix pink and purple, a uniform or grey crop does not.
    """

    min_nonwhite: float = 0.25
    white_level: int = 220
    min_edge: float = 2.0
    min_saturation_std: float = 4.0


def quality_measures(crop: np.ndarray, white_level: int = 220) -> dict[str, float]:
    """Non-white ratio, edge complexity and saturation spread of a uint8 RGB crop."""
    nonwhite = float((crop.min(axis=2) < white_level).mean())
    grey = crop.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
    # a Sobel kernel weighs 8 pixels-differences: /8 gives grey levels per pixel
    gx = ndimage.sobel(grey, axis=1, mode="nearest") / 8.0
    gy = ndimage.sobel(grey, axis=0, mode="nearest") / 8.0
    edge = float(np.hypot(gx, gy).mean())
    sat_std = float(saturation(crop).astype(np.float32).std())
    return {"nonwhite": nonwhite, "edge": edge, "saturation_std": sat_std}


def reject_reason(crop: np.ndarray, q: QualityThresholds) -> str | None:
    """The first quality test ``crop`` fails (see :data:`QUALITY_REASONS`), or None."""
    m = quality_measures(crop, q.white_level)
    if m["nonwhite"] < q.min_nonwhite:
        return "background"
    if m["edge"] < q.min_edge:
        return "flat"
    if m["saturation_std"] < q.min_saturation_std:
        return "colourless"
    return None
