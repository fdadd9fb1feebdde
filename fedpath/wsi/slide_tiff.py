"""Pyramidal TIFF slides read lazily through tifffile (the backend for .tif files).

Each read decodes only the tiles it touches (tifffile's zarr store over one
level); mpp and magnification come from Aperio's description or resolution tags.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from fedpath.data.base import DataError
from fedpath.wsi.slide_base import Slide


class TiffSlide(Slide):
    """A pyramidal TIFF read through tifffile's zarr store, one level at a time.

    The first image series is the slide; its pyramid levels (SubIFDs or reduced
    pages, as tifffile detects them, including Aperio SVS and NDPI layouts) are
    the slide's levels. Each read decodes only the tiles (or strips) it touches.
    """

    def __init__(self, path: Path) -> None:
        import tifffile
        import zarr

        self.path = path
        self._tif = tifffile.TiffFile(path)
        try:
            series = self._tif.series[0]
            levels = list(series.levels)
            axes = series.axes
            if axes not in ("YXS", "YX", "SYX"):
                raise DataError(
                    f"slide {str(path)!r}: unsupported TIFF axes {axes!r} "
                    "(expected YXS, YX or SYX)"
                )
            self._planar = axes == "SYX"
            dims: list[tuple[int, int]] = []
            for lvl in levels:
                shp = lvl.shape[1:] if self._planar else lvl.shape[:2]
                dims.append((int(shp[1]), int(shp[0])))
            self.level_dimensions = tuple(dims)
            self.level_downsamples = tuple(
                (dims[0][0] / lw + dims[0][1] / lh) / 2 for lw, lh in dims
            )
            self._arrays: list[Any] = [
                zarr.open_array(store=series.aszarr(level=i), mode="r")
                for i in range(len(levels))
            ]
            self.mpp, self._objective_power = _tiff_metadata(self._tif)
        except BaseException:
            self._tif.close()
            raise

    def _read(self, level: int, lx: int, ly: int, w: int, h: int) -> np.ndarray:
        arr = self._arrays[level]
        if self._planar:
            return np.moveaxis(np.asarray(arr[:, ly : ly + h, lx : lx + w]), 0, -1)
        return np.asarray(arr[ly : ly + h, lx : lx + w])

    def close(self) -> None:
        self._tif.close()


_SVS_MPP = re.compile(r"\bMPP\s*=\s*([0-9.]+)")
_SVS_MAG = re.compile(r"\bAppMag\s*=\s*([0-9.]+)")


def _tiff_metadata(tif: Any) -> tuple[float | None, float | None]:
    """(mpp, objective power) from Aperio's description or the resolution tags."""
    page = tif.pages[0]
    desc = page.description or ""
    mpp = mag = None
    if m := _SVS_MPP.search(desc):
        mpp = float(m.group(1))
    if m := _SVS_MAG.search(desc):
        mag = float(m.group(1))
    if mpp is None:
        unit = page.tags.get("ResolutionUnit")
        xres = page.tags.get("XResolution")
        # microns per unit: 2 = inch, 3 = centimetre (TIFF 6.0); 1 means "none"
        per_unit = {2: 25400.0, 3: 10000.0}.get(int(unit.value) if unit else 2)
        if xres is not None and per_unit is not None:
            num, den = xres.value
            if num > 0 and den > 0:
                cand = per_unit * den / num
                # 72 dpi and similar defaults are not a scan resolution
                if 0.05 <= cand <= 20.0:
                    mpp = cand
    return mpp, mag
