"""OpenSlide-style region reads, padding and thumbnails (fedpath.wsi.slide_base)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpath.data.base import DataError
from fedpath.wsi.slide import open_slide
from tests.wsi.helpers import block_mean


def test_out_of_bounds_raises_or_pads(slide_file: tuple[Path, list]) -> None:
    path, arrays = slide_file
    with open_slide(path) as s:
        with pytest.raises(DataError, match=r"slide_a\.tif.*x=2900, y=10.*outside"):
            s.read_region(2900, 10, 0, 200, 50)
        with pytest.raises(DataError, match="outside"):
            s.read_region(-1, 0, 0, 10, 10)
        with pytest.raises(DataError, match="level 5 does not exist"):
            s.read_region(0, 0, 5, 10, 10)
        padded = s.read_region(2900, -20, 0, 200, 50, pad=True)
        assert np.all(padded[:20] == 255) and np.all(padded[:, 100:] == 255)
        assert np.array_equal(padded[20:, :100], arrays[0][0:30, 2900:3000])


def test_thumbnail_is_small_and_faithful(slide_file: tuple[Path, list]) -> None:
    path, arrays = slide_file
    with open_slide(path) as s:
        thumb = s.get_thumbnail(300)
    assert thumb.shape == (200, 300, 3)
    ref = block_mean(arrays[0], 10).astype(np.float32)
    assert np.abs(thumb.astype(np.float32) - ref).mean() < 6.0
