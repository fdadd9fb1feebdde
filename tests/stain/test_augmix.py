"""Geometric AugMix (fedpath.stain.augmix)."""

from __future__ import annotations

import pytest
import torch

from fedpath.stain import (
    augmix,
)
from tests.stain.helpers import gen, images


def test_augmix_geometry_only() -> None:
    x = images()
    out = augmix(x, gen())
    assert out.shape == x.shape and out.dtype == x.dtype and torch.isfinite(out).all()
    assert out.min() >= 0 and out.max() <= 1
    assert torch.equal(out, augmix(x, gen()))
    assert not torch.equal(out, augmix(x, gen(1)))
    assert (out - x).abs().mean() > 0.01
    # Geometric ops only: colour statistics barely change.
    assert (out.mean(dim=(2, 3)) - x.mean(dim=(2, 3))).abs().max() < 0.03
    hist = torch.stack([torch.histc(x[:, c], 16, 0, 1) for c in range(3)])
    hist_out = torch.stack([torch.histc(out[:, c], 16, 0, 1) for c in range(3)])
    assert ((hist - hist_out).abs().sum(1) / hist.sum(1)).max() < 0.35
    fixed = augmix(x, gen(), width=1, depth=1, severity=10, alpha=0.5)
    assert torch.isfinite(fixed).all()
    with pytest.raises(ValueError, match="depth"):
        augmix(x, gen(), depth=(3, 1))


def test_augmix_flip_only_chain_is_exact() -> None:
    # A horizontal flip maps pixel centres onto pixel centres: no interpolation.
    from fedpath.stain.augmix import random_affine_matrices

    theta = random_affine_matrices(64, gen(), 16, 16, depth=1, severity=1)
    is_hflip = (theta[:, 0, 0] == -1) & (theta[:, 1, 1] == 1) & (theta[:, 0, 1] == 0)
    assert bool(is_hflip.any())
    grid = torch.nn.functional.affine_grid(
        theta[is_hflip][:1], [1, 3, 16, 16], align_corners=False
    )
    x = images()[:1, :, :16, :16]
    y = torch.nn.functional.grid_sample(
        x, grid, padding_mode="reflection", align_corners=False
    )
    torch.testing.assert_close(y, x.flip(-1), atol=1e-6, rtol=0)


def test_augmix_on_white_images_is_white() -> None:
    white = torch.ones(32, 3, 32, 32)
    torch.testing.assert_close(augmix(white, gen()), white)
