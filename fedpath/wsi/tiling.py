"""Grid tiling of whole slides into tissue patches, written as CLAM-compatible h5.

Follows CLAM's ``create_patches_fp.py`` (Lu et al., Nat. Biomed. Eng. 2021):
segment tissue on a low-resolution image (:mod:`.tissue`), lay a grid of patches
over the slide at the chosen level and keep those that cover enough tissue. The
output ``patches/<slide_id>.h5`` holds ``coords`` (N x 2, level-0 x, y) with CLAM's
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

from fedpath.data.base import DataError
from fedpath.utils.io import atomic_write_bytes
from fedpath.wsi import StageReport, atomic_h5, h5_complete, run_stage
from fedpath.wsi.slide import open_slide
from fedpath.wsi.slide_base import Slide
from fedpath.wsi.tissue import TissueMap, tissue_mask

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
    out = Path(out_dir)

    def tile(p: Path) -> int:
        mask = out / "masks" / f"{p.stem}.png" if save_masks else None
        return tile_slide(p, _coords_h5(out, p), mask_png=mask, **tile_kwargs)

    return run_stage(
        "tile",
        [Path(p) for p in slide_paths],
        lambda p: h5_complete(_coords_h5(out, p), "coords"),
        tile,
        skip_bad=skip_bad,
        quiet=quiet,
    )


def _coords_h5(out: Path, slide: Path) -> Path:
    return out / "patches" / f"{slide.stem}.h5"
