"""FedHD's alignment loss (against a direct numpy evaluation and autograd) and
the allocation of tokens to mixture components."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedpath.mil.alignment import alignment_loss, allocate_tokens, single_gaussian
from fedpath.mil.gmm import GMM, fit_gmm
from tests.mil_helpers import blobs


def _numpy_loss(tokens: np.ndarray, assign: np.ndarray, g: GMM, cov: bool) -> float:
    """L_align written out directly: explicit per-component mean and covariance."""
    total = 0.0
    for m in range(g.num_components):
        y = tokens[assign == m]
        if len(y) == 0:
            continue
        mu = y.mean(0)
        total += float(((g.means[m].numpy() - mu) ** 2).sum())
        if cov:
            sigma = (y - mu).T @ (y - mu) / len(y)
            target = g.covs[m].numpy()
            if g.covariance == "diag":
                sigma = np.diag(sigma)
            total += float(((target - sigma) ** 2).sum())
    return total


def test_allocate_tokens_is_proportional_with_a_floor() -> None:
    w = torch.tensor([0.7, 0.2, 0.095, 0.005])
    counts = allocate_tokens(w, 100)
    # two each, then the other 92 in proportion (largest remainders)
    assert int(counts.sum()) == 100 and counts.tolist() == [66, 20, 11, 3]
    assert allocate_tokens(w, 6).tolist() == [2, 2, 1, 1]  # floor lowered to 1


@pytest.mark.parametrize(
    ("dim", "kind", "cov"),
    [(4, "full", True), (4, "diag", True), (4, "full", False), (130, "full", True)],
)
def test_alignment_loss_matches_the_formula(dim: int, kind: str, cov: bool) -> None:
    x = blobs(n=900, d=dim)
    g = fit_gmm(x, 3, kind, dtype=torch.float64)  # type: ignore[arg-type]
    tokens = torch.randn(40, dim, dtype=torch.float64)
    # unbalanced on purpose: with D > 128 this takes the per-component loop
    assign = torch.tensor([0] * 30 + [1] * 6 + [2] * 4)
    got = alignment_loss(tokens, assign, g, covariance_term=cov)
    ref = _numpy_loss(tokens.numpy(), assign.numpy(), g, cov)
    assert float(got) == pytest.approx(ref, rel=1e-9)
    # components without tokens drop out; "assigned" weights by token share
    only0 = alignment_loss(tokens[:30], assign[:30], g, covariance_term=cov)
    assert float(only0) == pytest.approx(
        _numpy_loss(tokens[:30].numpy(), assign[:30].numpy(), g, cov), rel=1e-9
    )
    weighted = alignment_loss(tokens[:30], assign[:30], g, cov, weighting="assigned")
    assert float(weighted) == pytest.approx(float(only0), rel=1e-9)
    # the gradient (custom backward of the covariance term) against autograd
    # through an explicit covariance
    tokens.requires_grad_(True)
    alignment_loss(tokens, assign, g, covariance_term=cov).backward()
    explicit = tokens.new_zeros(())
    for m in range(3):
        y = tokens[assign == m]
        mu = y.mean(0)
        explicit = explicit + (g.means[m] - mu).square().sum()
        if cov:
            sigma = (y - mu).T @ (y - mu) / len(y)
            sigma = sigma.diagonal() if kind == "diag" else sigma
            explicit = explicit + (g.covs[m] - sigma).square().sum()
    (ref_grad,) = torch.autograd.grad(explicit, tokens)
    assert tokens.grad is not None
    assert torch.allclose(tokens.grad, ref_grad, rtol=1e-7, atol=1e-9)


def test_single_gaussian_is_the_sample_mean_and_covariance() -> None:
    x = blobs(n=300, d=3)
    g = single_gaussian(x, reg=1e-3)
    assert g.num_components == 1 and torch.allclose(g.means[0], x.mean(0))
    cov = torch.cov(x.T, correction=0) + 1e-3 * torch.eye(3, dtype=x.dtype)
    assert torch.allclose(g.covs[0], cov, atol=1e-10)
    diag = single_gaussian(x, reg=1e-3, diag=True)
    assert torch.allclose(diag.covs[0], cov.diagonal(), atol=1e-10)
