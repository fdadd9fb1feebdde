"""Tissue detection and grid tiling of whole slides, written as CLAM-compatible h5.

Follows CLAM's ``create_patches_fp.py`` (Lu et al., Nat. Biomed. Eng. 2021):
segment tissue on a low-resolution image by an Otsu threshold of the median-blurred
HSV saturation, drop small foreground components, lay a grid of patches over the
slide at the chosen level and keep those that cover enough tissue. The output
``patches/<slide_id>.h5`` holds ``coords`` (N x 2, level-0 x, y) with CLAM's
attributes (``patch_size``, ``patch_level``, ``downsample``, ``level_dim``,
``name``), so CLAM's feature extraction reads it as is, and so does
:mod:`fedpath.wsi.features`.

Every stage here writes to a temporary file and renames it, skips finished slides
when run again, and counts (``skip_bad``) or raises on unreadable slides.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from fedpath.data.base import DataError
from fedpath.utils.io import atomic_write_bytes
from fedpath.wsi import (
    StageReport,
    atomic_h5,
    check_unique_names,
    h5_complete,
    stage_progress,
)
from fedpath.wsi.slide import Slide, open_slide

# ------------------------------------------------------------------ tissue mask


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


# ------------------------------------------------------------------ patch quality


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


# ------------------------------------------------------------------ geometry


@dataclass(frozen=True)
class PatchGeometry:
    """Where and how big patches are read (``read_size`` pixels at ``level``).

    ``target_size`` is the patch size requested by the user; it differs from
    ``read_size`` only when no pyramid level matches the requested magnification
    exactly, in which case patches are read larger (or smaller) and resized.
    """

    level: int
    read_size: int
    target_size: int
    step0: int  # grid step in level-0 pixels
    magnification: float | None


def patch_geometry(
    slide: Slide,
    patch_size: int,
    magnification: float | None = None,
    level: int | None = None,
    step: int | None = None,
) -> PatchGeometry:
    """Choose the level and sizes for ``patch_size`` patches at a magnification.

    With ``magnification`` the level is the lowest-resolution one that is still
    at least as fine as requested (reading finer and downscaling never invents
    detail); otherwise ``level`` (default 0) is used as is, like CLAM's
    ``patch_level``. ``step`` (default ``patch_size``, no overlap) is in pixels of
    the requested magnification.
    """
    if patch_size < 1:
        raise DataError(f"patch_size must be >= 1, got {patch_size}")
    if magnification is not None and level is not None:
        raise DataError("give either magnification or level, not both")
    step = patch_size if step is None else step
    if step < 1:
        raise DataError(f"step must be >= 1, got {step}")
    if magnification is not None:
        base = slide.objective_power
        if base is None:
            raise DataError(
                f"slide {str(slide.path)!r}: magnification unknown (no objective "
                "power or mpp recorded); tile by level instead"
            )
        target_ds = base / magnification
        if target_ds < 0.99:
            raise DataError(
                f"slide {str(slide.path)!r} was scanned at {base:g}x and cannot be "
                f"tiled at {magnification:g}x"
            )
        finer = [
            i for i, d in enumerate(slide.level_downsamples) if d <= target_ds * 1.01
        ]
        lvl = max(finer, key=lambda i: slide.level_downsamples[i])
        read = max(1, round(patch_size * target_ds / slide.level_downsamples[lvl]))
        return PatchGeometry(
            lvl, read, patch_size, max(1, round(step * target_ds)), magnification
        )
    lvl = 0 if level is None else level
    if not 0 <= lvl < slide.level_count:
        raise DataError(
            f"slide {str(slide.path)!r}: level {lvl} does not exist "
            f"(levels 0..{slide.level_count - 1})"
        )
    ds = slide.level_downsamples[lvl]
    return PatchGeometry(lvl, patch_size, patch_size, max(1, round(step * ds)), None)


def grid_coords(slide: Slide, geom: PatchGeometry) -> np.ndarray:
    """Level-0 corners (N x 2, int64) of every grid patch that fits in the slide."""
    lw, lh = slide.level_dimensions[geom.level]
    ds = slide.level_downsamples[geom.level]
    # the last corner whose read stays inside the level, in level-0 pixels
    xmax = int((lw - geom.read_size) * ds)
    ymax = int((lh - geom.read_size) * ds)
    if xmax < 0 or ymax < 0:
        return np.zeros((0, 2), dtype=np.int64)
    xs = np.arange(0, xmax + 1, geom.step0, dtype=np.int64)
    ys = np.arange(0, ymax + 1, geom.step0, dtype=np.int64)
    gx, gy = np.meshgrid(xs, ys)  # row-major: y outer, x inner (CLAM's order)
    return np.stack([gx.ravel(), gy.ravel()], axis=1)


# ------------------------------------------------------------------ h5 files


def tile_slide(
    path: str | Path,
    out_h5: str | Path,
    patch_size: int = 256,
    magnification: float | None = None,
    level: int | None = None,
    step: int | None = None,
    tissue_threshold: float = 0.5,
    mask_size: int = 2048,
    median_kernel: int = 7,
    min_tissue_area: float = 4.0,
    mask_png: str | Path | None = None,
) -> int:
    """Tile one slide into tissue patches and write CLAM's coords h5.

    Parameters
    ----------
    patch_size, magnification, level, step
        See :func:`patch_geometry`; by default 256-px patches at level 0.
    tissue_threshold : float
        Keep a patch if at least this fraction of it is tissue.
    mask_size : int
        Longer side of the thumbnail the tissue is segmented on.
    min_tissue_area : float
        Smallest tissue component kept, in units of 512 x 512 level-0 patches
        (CLAM's ``a_t`` unit; CLAM's default of 100 suits whole resections, the
        smaller default here keeps biopsies and MIDOG-sized regions).
    mask_png : path, optional
        Also save the thumbnail with non-tissue darkened (quality control).

    Returns
    -------
    int
        The number of patches written.
    """
    out_h5 = Path(out_h5)
    if not 0.0 <= tissue_threshold <= 1.0:
        raise DataError(f"tissue_threshold must lie in [0, 1], got {tissue_threshold}")
    with open_slide(path) as slide:
        geom = patch_geometry(slide, patch_size, magnification, level, step)
        thumb = slide.get_thumbnail(mask_size)
        w0, h0 = slide.dimensions
        px_area = (w0 / thumb.shape[1]) * (h0 / thumb.shape[0])
        mask = tissue_mask(
            thumb,
            median_kernel=median_kernel,
            min_area=int(min_tissue_area * 512 * 512 / px_area),
        )
        tissue = TissueMap(mask, slide.dimensions)
        coords = grid_coords(slide, geom)
        extent0 = geom.read_size * slide.level_downsamples[geom.level]
        if len(coords):
            keep = tissue.fraction(coords, extent0, extent0) >= tissue_threshold
            coords = coords[keep]
        lw, lh = slide.level_dimensions[geom.level]
        with atomic_h5(out_h5) as fh:
            dset = fh.create_dataset(
                "coords", data=coords.astype(np.int64), maxshape=(None, 2)
            )
            # CLAM's attributes (create_patches_fp / WholeSlideImage.process_contour)
            dset.attrs["patch_size"] = geom.read_size
            dset.attrs["patch_level"] = geom.level
            dset.attrs["downsample"] = np.array([w0 / lw, h0 / lh])
            dset.attrs["downsample_level"] = np.array([lw, lh])
            dset.attrs["level_dim"] = np.array([lw, lh])
            dset.attrs["name"] = slide.name
            dset.attrs["save_path"] = str(out_h5.parent)
            # fedpath's additions: what is needed to reproduce or resize
            dset.attrs["target_patch_size"] = geom.target_size
            dset.attrs["magnification"] = geom.magnification or 0.0
            dset.attrs["tissue_threshold"] = tissue_threshold
            dset.attrs["step"] = geom.step0
            fh.attrs["num_patches"] = len(coords)
        if mask_png is not None:
            _save_mask_png(thumb, mask, Path(mask_png))
    return len(coords)


def _save_mask_png(thumb: np.ndarray, mask: np.ndarray, path: Path) -> None:
    shown = thumb.copy()
    shown[~mask] = (shown[~mask] * 0.35).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(shown).save(buf, format="PNG", compress_level=1)
    atomic_write_bytes(path, buf.getvalue())


# ------------------------------------------------------------------ stages


def tile_slides(
    slide_paths: Sequence[str | Path],
    out_dir: str | Path,
    *,
    skip_bad: bool = False,
    quiet: bool = True,
    save_masks: bool = True,
    **tile_kwargs: Any,
) -> StageReport:
    """Tile many slides into ``out_dir/patches/<slide_id>.h5`` (CLAM's layout).

    Resumable: a slide whose h5 exists and is complete is skipped. With
    ``skip_bad`` an unreadable slide is skipped and listed in the report;
    otherwise its :class:`DataError` (naming it) propagates. ``tile_kwargs`` go
    to :func:`tile_slide`; masks go to ``out_dir/masks/<slide_id>.png``.
    """
    paths = [Path(p) for p in slide_paths]
    check_unique_names(paths)
    out = Path(out_dir)
    report = StageReport()
    with stage_progress("tile", len(paths), quiet) as advance:
        for p in paths:
            h5 = out / "patches" / f"{p.stem}.h5"
            if h5_complete(h5, "coords"):
                report.resumed.append(p.stem)
            else:
                try:
                    mask = out / "masks" / f"{p.stem}.png" if save_masks else None
                    report.patches += tile_slide(p, h5, mask_png=mask, **tile_kwargs)
                    report.done.append(p.stem)
                except DataError as err:
                    if not skip_bad:
                        raise
                    report.bad.append(str(err))
            advance(p.stem)
    return report
