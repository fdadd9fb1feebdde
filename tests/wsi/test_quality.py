"""The crop quality filter (fedpath.wsi.quality): which check a crop fails."""

from __future__ import annotations

import numpy as np

from fedpath.wsi.quality import QualityThresholds, quality_measures, reject_reason


def test_reject_reason_names_the_failed_check() -> None:
    white = np.full((128, 128, 3), 250, np.uint8)
    assert reject_reason(white, QualityThresholds()) == "background"
    flat = np.full((128, 128, 3), (200, 120, 180), np.uint8)
    assert reject_reason(flat, QualityThresholds()) == "flat"
    grey = (np.random.default_rng(0).random((128, 128, 1)) * 200).astype(np.uint8)
    assert reject_reason(np.repeat(grey, 3, 2), QualityThresholds()) == "colourless"


def test_quality_measures_on_known_crops() -> None:
    # half the pixels white: non-white ratio 0.5; a vertical step edge of 100 grey
    # levels: Sobel/8 gives 50 per pixel on the two columns next to the step
    crop = np.full((16, 16, 3), 255, np.uint8)
    crop[:, :8] = 155
    m = quality_measures(crop, white_level=220)
    assert m["nonwhite"] == 0.5
    assert m["edge"] == np.float32(2 * 16 * 50.0 / 256)
    assert m["saturation_std"] == 0.0  # grey and white: no saturation at all


def test_a_textured_coloured_crop_passes() -> None:
    rng = np.random.default_rng(1)
    crop = np.empty((64, 64, 3), np.uint8)
    crop[..., 0] = rng.integers(120, 200, (64, 64))
    crop[..., 1] = rng.integers(40, 120, (64, 64))
    crop[..., 2] = rng.integers(100, 200, (64, 64))
    assert reject_reason(crop, QualityThresholds()) is None
    # the same crop fails once the threshold is above what it has
    assert reject_reason(crop, QualityThresholds(min_edge=1e6)) == "flat"
