"""Tissue masks and tissue fractions (fedpath.wsi.tissue)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpath.wsi.slide import open_slide
from fedpath.wsi.tissue import TissueMap, tissue_mask
from tests.wsi.helpers import tissue_edge


def test_tissue_mask_finds_the_tissue(slide_file: tuple[Path, list]) -> None:
    path, _ = slide_file
    with open_slide(path) as s:
        thumb = s.get_thumbnail(600)
    mask = tissue_mask(thumb)
    truth = np.arange(600)[None, :] < tissue_edge(3000, 2000)[::5][:, None] / 5
    iou = (mask & truth).sum() / (mask | truth).sum()
    assert iou > 0.95
    assert not tissue_mask(np.full((64, 64, 3), 245, np.uint8)).any()


def test_tissue_map_fraction_is_exact_on_aligned_boxes() -> None:
    mask = np.zeros((10, 20), bool)
    mask[:, :5] = True
    tm = TissueMap(mask, (200, 100))  # 10 level-0 px per mask px
    frac = tm.fraction(np.array([[0, 0], [30, 0], [100, 50]]), 40, 40)
    assert frac == pytest.approx([1.0, 0.5, 0.0])
