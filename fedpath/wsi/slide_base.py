"""The :class:`Slide` abstraction: OpenSlide's geometry, region reads and thumbnails.

A backend (:mod:`.slide_tiff`, :mod:`.slide_openslide`) only says which levels a
slide has and how to decode a rectangle inside one level (``Slide._read``); this
class turns that into OpenSlide-style reads. Coordinates follow OpenSlide:
``(x, y)`` is the top-left corner at level 0, ``(w, h)`` the size at ``level``.
:meth:`Slide.get_thumbnail` reads the smallest sufficient level in bands and
reduces each band before reading the next, so memory stays bounded.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np
from PIL import Image

from fedpath.data.base import DataError
from fedpath.utils.closing import Closing

_WHITE = 255
#: Bytes of one band read by get_thumbnail (bounds its memory on any slide size).
_BAND_BYTES = 64 * 2**20


class Slide(Closing, ABC):
    """A whole-slide image opened lazily (OpenSlide's geometry conventions).

    Attributes
    ----------
    path : Path
        The slide file.
    level_dimensions : tuple of (width, height)
        Size of every pyramid level, level 0 first.
    level_downsamples : tuple of float
        Downsample factor of every level relative to level 0.
    mpp : float or None
        Microns per pixel at level 0, when the file records it.
    """

    path: Path
    level_dimensions: tuple[tuple[int, int], ...]
    level_downsamples: tuple[float, ...]
    mpp: float | None
    _objective_power: float | None = None

    @property
    def dimensions(self) -> tuple[int, int]:
        """(width, height) of level 0."""
        return self.level_dimensions[0]

    @property
    def level_count(self) -> int:
        return len(self.level_dimensions)

    @property
    def name(self) -> str:
        """Slide id: the file name without its suffix (CLAM's ``slide_id``)."""
        return self.path.stem

    @property
    def objective_power(self) -> float | None:
        """Scanning magnification of level 0 (recorded, or 10 / mpp; None if unknown).

        10 µm / mpp is the usual convention (0.25 µm/px = 40x, 0.5 µm/px = 20x).
        """
        if self._objective_power:
            return self._objective_power
        if self.mpp:
            return 10.0 / self.mpp
        return None

    def best_level_for_downsample(self, downsample: float) -> int:
        """The level whose downsample is closest to ``downsample`` (in log scale)."""
        gaps = [abs(math.log(d / downsample)) for d in self.level_downsamples]
        return int(np.argmin(gaps))

    # ------------------------------------------------------------------ regions

    def read_region(
        self, x: int, y: int, level: int, w: int, h: int, *, pad: bool = False
    ) -> np.ndarray:
        """uint8 RGB array (h, w, 3) of the region at level-0 corner ``(x, y)``.

        Parameters
        ----------
        x, y : int
            Top-left corner in level-0 pixels (as OpenSlide's ``read_region``).
        level : int
            Pyramid level to read from; ``w`` and ``h`` are pixels of that level.
        pad : bool
            If True, parts outside the slide are white; if False (default), a
            region that leaves the slide raises :class:`DataError`.
        """
        if not 0 <= level < self.level_count:
            raise DataError(
                f"slide {str(self.path)!r}: level {level} does not exist "
                f"(levels 0..{self.level_count - 1})"
            )
        if w <= 0 or h <= 0:
            raise DataError(
                f"slide {str(self.path)!r}: region size must be positive, got {w}x{h}"
            )
        ds = self.level_downsamples[level]
        lw, lh = self.level_dimensions[level]
        # OpenSlide maps the level-0 corner to the level by plain division
        lx, ly = math.floor(x / ds), math.floor(y / ds)
        inside = lx >= 0 and ly >= 0 and lx + w <= lw and ly + h <= lh
        if inside:
            return self._checked_read(level, lx, ly, w, h, (x, y))
        if not pad:
            raise DataError(
                f"slide {str(self.path)!r}: region x={x}, y={y}, w={w}, h={h} at "
                f"level {level} lies outside the slide ({lw}x{lh} at that level, "
                f"{self.dimensions[0]}x{self.dimensions[1]} at level 0)"
            )
        out = np.full((h, w, 3), _WHITE, dtype=np.uint8)
        x0, y0 = max(lx, 0), max(ly, 0)
        x1, y1 = min(lx + w, lw), min(ly + h, lh)
        if x1 > x0 and y1 > y0:
            part = self._checked_read(level, x0, y0, x1 - x0, y1 - y0, (x, y))
            out[y0 - ly : y1 - ly, x0 - lx : x1 - lx] = part
        return out

    def _checked_read(
        self, level: int, lx: int, ly: int, w: int, h: int, at: tuple[int, int]
    ) -> np.ndarray:
        try:
            return _to_rgb(self._read(level, lx, ly, w, h))
        except DataError:
            raise
        except Exception as err:  # decoders raise many types; all mean "corrupt"
            raise DataError(
                f"slide {str(self.path)!r}: cannot decode region x={at[0]}, "
                f"y={at[1]}, {w}x{h} at level {level}: {type(err).__name__}: {err}"
            ) from None

    @abstractmethod
    def _read(self, level: int, lx: int, ly: int, w: int, h: int) -> np.ndarray:
        """Pixels of a region given in coordinates of ``level``, inside the level."""

    # ---------------------------------------------------------------- thumbnail

    def get_thumbnail(self, max_size: int) -> np.ndarray:
        """uint8 RGB thumbnail whose longer side is ``max_size`` (never upscaled).

        Reads the smallest level that is at least as large as the thumbnail, in
        horizontal bands of bounded size, block-averages each band, then resizes
        the reduced image (antialiased) to the exact size: memory stays bounded
        by the band size however large the slide is.
        """
        w0, h0 = self.dimensions
        scale = min(1.0, max_size / max(w0, h0))
        tw, th = max(1, round(w0 * scale)), max(1, round(h0 * scale))
        level = 0
        for i, (lw, lh) in enumerate(self.level_dimensions):
            if lw >= tw and lh >= th:
                level = i  # levels shrink, so the last fitting one is the smallest
        lw, lh = self.level_dimensions[level]
        k = max(1, min(lw // tw, lh // th))  # integer block-mean factor
        rows = max(k, (_BAND_BYTES // max(1, lw * 3)) // k * k)
        bands = []
        for ly in range(0, lh, rows):
            bh = min(rows, lh - ly)
            at = (0, round(ly * self.level_downsamples[level]))
            band = self._checked_read(level, 0, ly, lw, bh, at)
            bands.append(_block_mean(band, k))
        reduced = np.concatenate(bands, axis=0)
        img = Image.fromarray(reduced).resize(
            (tw, th), Image.Resampling.BILINEAR, reducing_gap=None
        )
        return np.asarray(img, dtype=np.uint8)

    # ---------------------------------------------------------------- lifecycle

    @abstractmethod
    def close(self) -> None:
        """Release the file handle (``with slide:`` calls it on the way out)."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({str(self.path)!r}, levels="
            f"{list(self.level_dimensions)}, mpp={self.mpp})"
        )


def _block_mean(band: np.ndarray, k: int) -> np.ndarray:
    """Average k x k blocks (edge rows/columns replicated to a multiple of k)."""
    if k == 1:
        return band
    h, w = band.shape[:2]
    ph, pw = -h % k, -w % k
    if ph or pw:
        band = np.pad(band, ((0, ph), (0, pw), (0, 0)), mode="edge")
    h, w = band.shape[:2]
    # integer sums of a reshaped view: no float copy of the band
    sums = band.reshape(h // k, k, w // k, k, 3).sum(axis=(1, 3), dtype=np.uint32)
    return ((sums + k * k // 2) // (k * k)).astype(np.uint8)


def _to_rgb(arr: np.ndarray) -> np.ndarray:
    """(h, w, 3) uint8 from grey, RGB or RGBA (alpha composited on white)."""
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.dtype != np.uint8:
        if arr.dtype == np.uint16:
            arr = (arr >> 8).astype(np.uint8)
        else:
            raise DataError(f"unsupported pixel type {arr.dtype} (expected uint8)")
    c = arr.shape[2]
    if c == 1:
        return np.ascontiguousarray(np.repeat(arr, 3, axis=2))
    if c == 4:
        alpha = arr[:, :, 3:4].astype(np.uint16)
        rgb = (arr[:, :, :3] * alpha + _WHITE * (255 - alpha)) // 255
        return rgb.astype(np.uint8)
    return np.ascontiguousarray(arr[:, :, :3])
