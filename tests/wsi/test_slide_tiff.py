"""Pyramidal TIFF slides read tile by tile (fedpath.wsi.slide_tiff)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tifffile

from fedpath.wsi.slide import open_slide


def test_read_region_matches_the_written_levels(slide_file: tuple[Path, list]) -> None:
    path, arrays = slide_file
    with open_slide(path) as s:
        assert s.dimensions == (3000, 2000)
        assert s.level_count == 3
        assert s.level_dimensions == ((3000, 2000), (1500, 1000), (750, 500))
        assert s.level_downsamples == pytest.approx((1.0, 2.0, 4.0))
        assert s.mpp == pytest.approx(0.25)
        assert s.objective_power == pytest.approx(40.0)
        # a region across tile borders at level 0, and one at level 1
        r0 = s.read_region(250, 500, 0, 300, 140)
        assert r0.dtype == np.uint8 and r0.shape == (140, 300, 3)
        assert np.array_equal(r0, arrays[0][500:640, 250:550])
        r1 = s.read_region(1000, 600, 1, 200, 100)  # level-0 corner, level-1 size
        assert np.array_equal(r1, arrays[1][300:400, 500:700])
        r2 = s.read_region(2800, 1800, 2, 50, 50)  # last partial tile
        assert np.array_equal(r2, arrays[2][450:500, 700:750])


def test_reads_decode_tiles_never_a_whole_page(
    slide_file: tuple[Path, list], monkeypatch: pytest.MonkeyPatch
) -> None:
    def whole_page(*args: object, **kwargs: object) -> None:
        raise AssertionError("a whole TIFF page was decoded")

    monkeypatch.setattr(tifffile.TiffPage, "asarray", whole_page)
    monkeypatch.setattr(tifffile.TiffPageSeries, "asarray", whole_page)
    path, arrays = slide_file
    with open_slide(path) as s:
        assert np.array_equal(s.read_region(0, 0, 0, 64, 64), arrays[0][:64, :64])
        assert s.get_thumbnail(256).shape == (171, 256, 3)
