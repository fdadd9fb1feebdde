"""Explicit-generator random draws of the stain package (fedpath.stain._random)."""

from __future__ import annotations

import torch

from fedpath.stain._random import sample_beta, sample_dirichlet
from tests.stain.helpers import gen


def test_beta_and_dirichlet_draws() -> None:
    lam = sample_beta(0.1, 0.1, (4000,), gen())
    assert torch.isfinite(lam).all() and lam.min() >= 0 and lam.max() <= 1
    assert abs(float(lam.mean()) - 0.5) < 0.05
    assert float(((lam < 0.01) | (lam > 0.99)).float().mean()) > 0.6  # U-shaped
    lam2 = sample_beta(2.0, 5.0, (4000,), gen(1))
    assert abs(float(lam2.mean()) - 2 / 7) < 0.02
    w = sample_dirichlet(1.0, 3, 500, gen(2))
    torch.testing.assert_close(w.sum(1), torch.ones(500))
    assert torch.equal(
        sample_beta(0.3, 0.3, (5,), gen(7)), sample_beta(0.3, 0.3, (5,), gen(7))
    )
