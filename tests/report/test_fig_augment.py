"""FedStain's augmentation sheet (fedpath.report.fig_augment): one column per
augmentation, seeded, laid out on a white grid."""

from __future__ import annotations

import numpy as np
import torch

from fedpath.report.fig_augment import COLUMNS, augmentations, build_grid


def test_the_columns_are_seeded_images_of_the_rows() -> None:
    g = torch.Generator().manual_seed(0)
    x, pool = torch.rand(2, 3, 8, 8, generator=g), torch.rand(6, 3, 8, 8, generator=g)
    cols = augmentations(x, pool, seed=3)
    assert len(cols) == len(COLUMNS) and torch.equal(cols[0], x)
    assert all(c.shape == x.shape and torch.isfinite(c).all() for c in cols)
    again = augmentations(x, pool, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(cols, again, strict=True))
    assert not torch.equal(cols[1], x)  # RandStain changed the colours


def test_the_grid_places_each_image_with_white_gaps() -> None:
    black, white = torch.zeros(2, 3, 4, 5), torch.ones(2, 3, 4, 5)
    sheet = build_grid([black, white], gap=1)
    assert sheet.shape == (2 * 5 + 1, 2 * 6 + 1, 3) and sheet.dtype == np.uint8
    assert (sheet[1:5, 1:6] == 0).all() and (sheet[6:10, 1:6] == 0).all()
    assert (sheet[1:5, 7:12] == 255).all()
    assert (sheet[0] == 255).all() and (sheet[:, 6] == 255).all()  # the gaps
