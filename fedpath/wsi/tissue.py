"""Tissue detection on slide thumbnails, and the tissue fraction of any slide box.

:func:`tissue_mask` follows CLAM's ``segmentTissue`` (Lu et al., Nat. Biomed.
Eng. 2021): an Otsu threshold of the median-blurred HSV saturation, with small
foreground components dropped. :class:`TissueMap` keeps a mask with its scale and
answers how much of a level-0 rectangle is tissue (tiling, MvMidog negatives).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import ndimage

from fedpath.wsi.slide_base import Slide


def saturation(rgb: np.ndarray) -> np.ndarray:
    """HSV saturation of a uint8 RGB image as uint8 (OpenCV's convention, 0-255)."""
    mx = rgb.max(axis=2).astype(np.uint32)
    spread = mx - rgb.min(axis=2)
    # round(255 * spread / max) in integers; 0 where max == 0 (spread is 0 too)
    return ((spread * 510 + mx) // np.maximum(2 * mx, 1)).astype(np.uint8)


def otsu_threshold(values: np.ndarray) -> int:
    """Otsu's threshold of uint8 values: maximizes the between-class variance.

    Returns t such that ``values > t`` is the foreground (as OpenCV's THRESH_OTSU).
    """
    hist = np.bincount(values.ravel(), minlength=256).astype(np.float64)
    total = hist.sum()
    if total == 0:
        return 0
    levels = np.arange(256, dtype=np.float64)
    w0 = np.cumsum(hist)
    m0 = np.cumsum(hist * levels)
    w1 = total - w0
    mu_all = m0[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (mu_all * w0 - m0 * total) ** 2 / (w0 * w1)
    between[~np.isfinite(between)] = -1.0
    return int(np.argmax(between))


def tissue_mask(
    thumb: np.ndarray,
    *,
    median_kernel: int = 7,
    min_saturation: int = 8,
    min_area: int = 0,
) -> np.ndarray:
    """Boolean tissue mask of a thumbnail, as CLAM's ``segmentTissue`` computes it.

    Parameters
    ----------
    thumb : ndarray
        uint8 RGB thumbnail (h, w, 3).
    median_kernel : int
        Median blur of the saturation channel (CLAM's ``mthresh``, default 7).
    min_saturation : int
        Floor of the Otsu threshold, so an all-background slide (whose Otsu
        threshold falls inside the noise) yields no tissue; CLAM's fixed
        ``sthresh`` is 8.
    min_area : int
        Connected tissue components smaller than this many mask pixels are
        dropped (CLAM's ``a_t`` area filter).
    """
    sat = saturation(thumb)
    k = max(1, median_kernel)
    # Otsu's threshold of the blurred image, estimated on a subsample (the
    # histogram is all it needs; a full-size 7x7 median costs seconds)
    sub = max(1, int(np.sqrt(sat.size / 256**2)))
    probe = ndimage.median_filter(sat[::sub, ::sub], size=k, mode="nearest")
    t = max(otsu_threshold(probe), min_saturation)
    # median(sat) > t exactly when most of the k x k window exceeds t: a box
    # filter of the binary image gives CLAM's medianBlur-then-threshold mask
    above = ndimage.uniform_filter((sat > t).astype(np.float32), k, mode="nearest")
    mask = above * (k * k) > (k * k) / 2
    if min_area > 1 and mask.any():
        labels, n = ndimage.label(mask)
        sizes = np.bincount(labels.ravel(), minlength=n + 1)
        keep = sizes >= min_area
        keep[0] = False
        mask = keep[labels]
    return mask


class TissueMap:
    """A tissue mask with its scale, answering "how much tissue is in this box?".

    A summed-area table makes the tissue fraction of any level-0 rectangle O(1),
    so scoring every grid position of a 100k x 100k slide is a vector operation.
    """

    def __init__(self, mask: np.ndarray, slide_size: tuple[int, int]) -> None:
        self.mask = mask
        h, w = mask.shape
        self.sx = slide_size[0] / w
        self.sy = slide_size[1] / h
        # int32 holds any count of a mask under 2**31 pixels and halves the memory
        dt = np.int32 if mask.size < 2**31 else np.int64
        sat = np.zeros((h + 1, w + 1), dtype=dt)
        sat[1:, 1:] = np.cumsum(np.cumsum(mask, axis=0, dtype=dt), axis=1, dtype=dt)
        self._sat = sat

    @classmethod
    def from_slide(
        cls, slide: Slide, mask_size: int = 2048, **mask_kwargs: Any
    ) -> TissueMap:
        """Mask of ``slide``'s thumbnail (longer side ``mask_size``)."""
        thumb = slide.get_thumbnail(mask_size)
        return cls(tissue_mask(thumb, **mask_kwargs), slide.dimensions)

    def fraction(self, xy: np.ndarray, w0: float, h0: float) -> np.ndarray:
        """Tissue fraction of the level-0 boxes at corners ``xy`` (N x 2) of w0 x h0."""
        xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
        h, w = self.mask.shape
        x0 = np.clip(np.floor(xy[:, 0] / self.sx), 0, w).astype(np.int64)
        y0 = np.clip(np.floor(xy[:, 1] / self.sy), 0, h).astype(np.int64)
        x1 = np.clip(np.ceil((xy[:, 0] + w0) / self.sx), 0, w).astype(np.int64)
        y1 = np.clip(np.ceil((xy[:, 1] + h0) / self.sy), 0, h).astype(np.int64)
        x1, y1 = np.maximum(x1, x0 + 1).clip(max=w), np.maximum(y1, y0 + 1).clip(max=h)
        s = self._sat
        inside = s[y1, x1].astype(np.int64) - s[y0, x1] - s[y1, x0] + s[y0, x0]
        area = np.maximum((x1 - x0) * (y1 - y0), 1)
        return inside / area
