"""Placing and writing one slide's MvMidog patches (fedpath.wsi.midog_patches)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fedpath.data.base import DataError
from fedpath.wsi.midog_annotations import Figure, SlideEntry
from fedpath.wsi.midog_params import MvMidogParams
from fedpath.wsi.midog_patches import _far_from, build_slide, place_positive
from fedpath.wsi.quality import QualityThresholds
from fedpath.wsi.slide_base import Slide
from tests.wsi.helpers import he_image


def test_place_positive_edges() -> None:
    rng = np.random.default_rng(0)
    xs = {
        place_positive((500, 500, 550, 550), (2000, 2000), 128, 32, 3, rng)
        for _ in range(20)
    }
    assert len(xs) > 5 and not any(a for _, _, a in xs)
    for x, _y, _ in xs:
        assert x <= 500 and x + 128 >= 550 and abs(x + 64 - 525) <= 32
    x, y, anchored = place_positive(
        (1960, 1970, 2000, 2000), (2000, 2000), 128, 32, 3, rng
    )
    assert anchored and (x, y) == (1872, 1872)


class ArraySlide(Slide):
    """A one-level slide held in memory."""

    def __init__(self, image: np.ndarray) -> None:
        self.image = image
        self.path = Path("memory/001.tiff")
        self.level_dimensions = ((image.shape[1], image.shape[0]),)
        self.level_downsamples = (1.0,)
        self.mpp = None

    def _read(self, level: int, lx: int, ly: int, w: int, h: int) -> np.ndarray:
        return self.image[ly : ly + h, lx : lx + w]

    def close(self) -> None:
        pass


def test_far_from_grows_the_crop_by_the_margin() -> None:
    boxes = np.array([[100.0, 100.0, 110.0, 110.0]])
    assert _far_from(0, 0, 50, np.empty((0, 4)), 10)
    assert _far_from(0, 0, 50, boxes, 49)  # crop + 49 px ends at 99
    assert not _far_from(0, 0, 50, boxes, 51)
    assert not _far_from(90, 90, 16, boxes, 0)  # overlaps the box itself


ACCEPT_ALL = QualityThresholds(min_nonwhite=0, min_edge=0, min_saturation_std=0)


def entry_with(*figures: Figure) -> SlideEntry:
    return SlideEntry(1, "001.tiff", "xr", None, list(figures))


def test_build_slide_writes_each_crop_with_its_row(tmp_path: Path) -> None:
    img = he_image(480, 320, seed=1, figures=[(100, 100), (300, 200)])
    entry = entry_with(
        Figure(0, (90, 90, 110, 110), True),
        Figure(1, (290, 190, 310, 210), False),  # an imposter: a hard negative
    )
    p = MvMidogParams(patch_size=64, mask_size=128, negatives_per_slide=2,
                      quality=ACCEPT_ALL)  # fmt: skip
    res = build_slide(entry, ArraySlide(img), tmp_path, p, None)
    assert res.counts == {"anchored": 0, "positives": 1, "negatives": 3,
                          "negatives_short": 0}  # fmt: skip
    kinds = [(r["label"], r["kind"], r["annotation"]) for r in res.rows]
    assert kinds == [
        ("mitotic_figure", "mitotic_figure", 0),
        ("negative", "imposter", 1),
        ("negative", "random", -1),
        ("negative", "random", -1),
    ]
    for r in res.rows:
        with Image.open(tmp_path / r["path"]) as im:
            crop = np.asarray(im)
        assert np.array_equal(crop, img[r["y"] : r["y"] + 64, r["x"] : r["x"] + 64])
        assert r["path"].startswith("patches/xr/001/")
    pos = res.rows[0]
    assert pos["x"] <= 90 and pos["x"] + 64 >= 110  # the figure lies in its crop
    for r in res.rows[2:]:  # random negatives keep the margin to the figure
        assert _far_from(r["x"], r["y"], 64, np.array([[90, 90, 110, 110.0]]), 64)
    again = build_slide(entry, ArraySlide(img), tmp_path / "again", p, None)
    assert [(r["x"], r["y"]) for r in again.rows] == [
        (r["x"], r["y"]) for r in res.rows
    ]


def test_build_slide_counts_rejected_crops_and_boxes_off_the_slide(
    tmp_path: Path,
) -> None:
    white = np.full((200, 200, 3), 250, np.uint8)
    off = Figure(1, (400, 10, 420, 30), True)
    entry = entry_with(Figure(0, (50, 50, 70, 70), True), off)
    p = MvMidogParams(patch_size=64, mask_size=64, negatives_per_slide=0)
    with pytest.raises(DataError, match=r"annotations\[1\] box .* outside the slide"):
        build_slide(entry, ArraySlide(white), tmp_path, p, None)
    bad: list[str] = []
    res = build_slide(entry, ArraySlide(white), tmp_path, p, bad)
    assert len(bad) == 1 and "annotations[1]" in bad[0]
    assert res.rows == []  # a blank crop fails the quality filter
    assert res.counts == {"anchored": 0, "rejected_mitotic_figure_background": 1}
