"""Gaussian log-densities from Cholesky precision factors, against scipy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from fedpath.mil.gmm_density import log_gauss, precision_factors


def spd(n: int, d: int, seed: int) -> torch.Tensor:
    """``n`` random symmetric positive definite ``d x d`` matrices (float64)."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(n, d, d, generator=gen, dtype=torch.float64)
    return a @ a.transpose(1, 2) + 0.5 * torch.eye(d, dtype=torch.float64)


@pytest.mark.parametrize("kind", ["full", "diag"])
def test_log_gauss_matches_scipy_for_each_slide_and_component(kind: str) -> None:
    gen = torch.Generator().manual_seed(0)
    s, n, m, d = 2, 7, 3, 4
    x = torch.randn(s, n, d, generator=gen, dtype=torch.float64)
    means = torch.randn(s, m, d, generator=gen, dtype=torch.float64)
    covs = spd(s * m, d, 1).view(s, m, d, d)
    if kind == "diag":
        covs = covs.diagonal(dim1=-2, dim2=-1).contiguous()
    prec, half = precision_factors(covs, kind)  # type: ignore[arg-type]
    got = log_gauss(x, means, prec, half, kind)  # type: ignore[arg-type]
    assert got.shape == (s, n, m)
    for i in range(s):
        for j in range(m):
            cov = covs[i, j].numpy()
            cov = np.diag(cov) if kind == "diag" else cov
            ref = multivariate_normal(means[i, j].numpy(), cov).logpdf(x[i].numpy())
            assert np.allclose(got[i, :, j].numpy(), ref, atol=1e-9)


def test_a_singular_float32_covariance_is_refactorised_with_jitter() -> None:
    d = 3
    v = torch.tensor([1.0, 2.0, 3.0])
    singular = torch.stack([torch.outer(v, v), torch.eye(d)])  # rank 1, then fine
    prec, half = precision_factors(singular, "full")
    assert bool(torch.isfinite(prec).all()) and bool(torch.isfinite(half).all())
    # the regular one is untouched: P = I, log det = 0
    assert torch.allclose(prec[1], torch.eye(d)) and float(half[1]) == 0.0
    # the jittered factor reproduces the matrix it stands for, up to the jitter
    inv = torch.linalg.inv(prec[0].double().T)  # L
    jitter = 1e-6 * float(torch.outer(v, v).diagonal().mean())
    want = torch.outer(v, v).double() + jitter * torch.eye(d, dtype=torch.float64)
    assert torch.allclose(inv @ inv.T, want, rtol=1e-3, atol=1e-4)
