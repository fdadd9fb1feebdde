"""The OpenSlide backend (fedpath.wsi.slide_openslide); reading needs openslide."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fedpath.wsi.slide import open_slide
from fedpath.wsi.slide_openslide import _float_or_none, openslide_available


def test_openslide_backend_agrees(slide_file: tuple[Path, list]) -> None:
    pytest.importorskip("openslide")
    path, arrays = slide_file
    with open_slide(path, backend="openslide") as s:
        assert s.level_dimensions == ((3000, 2000), (1500, 1000), (750, 500))
        assert np.array_equal(
            s.read_region(250, 500, 0, 300, 140), arrays[0][500:640, 250:550]
        )
        assert np.array_equal(
            s.read_region(1000, 600, 1, 200, 100), arrays[1][300:400, 500:700]
        )


def test_properties_parse_to_floats_or_none() -> None:
    assert _float_or_none("0.2527") == 0.2527
    assert _float_or_none("40") == 40.0
    assert _float_or_none(None) is None
    assert _float_or_none("") is None
    assert _float_or_none("n/a") is None  # some scanners write text there


def test_availability_follows_the_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openslide", None)  # import raises ImportError
    assert openslide_available() is False
