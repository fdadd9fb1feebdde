"""Slides of any format OpenSlide reads (.svs, .ndpi, .mrxs, .scn, ...).

openslide-python (and its shared library) is optional: :func:`openslide_available`
says whether this backend can be used, and nothing imports openslide before.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpath.wsi.slide_base import Slide


class OpenSlideSlide(Slide):
    """Any format OpenSlide reads (.svs, .ndpi, .mrxs, .scn, ...)."""

    def __init__(self, path: Path) -> None:
        import openslide

        self.path = path
        self._osr = openslide.OpenSlide(str(path))
        self.level_dimensions = tuple(
            (int(w), int(h)) for w, h in self._osr.level_dimensions
        )
        self.level_downsamples = tuple(float(d) for d in self._osr.level_downsamples)
        props = self._osr.properties
        self.mpp = _float_or_none(props.get(openslide.PROPERTY_NAME_MPP_X))
        self._objective_power = _float_or_none(
            props.get(openslide.PROPERTY_NAME_OBJECTIVE_POWER)
        )

    def _read(self, level: int, lx: int, ly: int, w: int, h: int) -> np.ndarray:
        ds = self.level_downsamples[level]
        img = self._osr.read_region((round(lx * ds), round(ly * ds)), level, (w, h))
        return np.asarray(img)  # RGBA; transparent (unscanned) areas become white

    def close(self) -> None:
        self._osr.close()


def _float_or_none(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def openslide_available() -> bool:
    """True if openslide-python and its shared library can be imported."""
    try:
        import openslide  # noqa: F401
    except (ImportError, OSError):  # OSError: the shared library is missing
        return False
    return True
