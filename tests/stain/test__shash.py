"""The sinh-arcsinh fitting engine (fedpath.stain._shash): moments and Jacobian
against scipy and finite differences, the Levenberg-Marquardt fit, its budget."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from fedpath.stain._shash import (
    EPSILON_MAX,
    Fit,
    ShapeFit,
    _shape_and_jacobian,
    asinh_monotone,
    levenberg_marquardt,
)


def test_asinh_monotone_is_asinh_and_keeps_order() -> None:
    z = torch.linspace(-50, 50, 20001, dtype=torch.float64)
    u = asinh_monotone(z)
    np.testing.assert_allclose(u.numpy(), np.arcsinh(z.numpy()), atol=1e-7)
    assert bool((u[1:] >= u[:-1]).all())
    z32 = torch.randn(4096, generator=torch.Generator().manual_seed(0)).sort().values
    assert bool((asinh_monotone(z32).diff() >= 0).all())


def u_of(seed: int, n: int = 2000) -> torch.Tensor:
    """asinh of standard normal pixels, (1, 2, n) in float64."""
    g = torch.Generator().manual_seed(seed)
    return asinh_monotone(torch.randn(1, 2, n, generator=g, dtype=torch.float64))


def shape_of(u: torch.Tensor, e: float, d: float) -> tuple[float, float]:
    """scipy's skewness and excess kurtosis of sinh(d u + e), channel 0."""
    w = np.sinh(d * u[0, 0].numpy() + e)
    return float(scipy.stats.skew(w)), float(scipy.stats.kurtosis(w))


def test_moments_match_scipy_and_the_jacobian_finite_differences() -> None:
    u = u_of(1)
    u_range = (u.amin(-1, keepdim=True), u.amax(-1, keepdim=True))
    e = torch.full((1, 2, 1), 0.3, dtype=torch.float64)
    log_d = torch.full((1, 2, 1), math.log(1.2), dtype=torch.float64)
    moments, jac = _shape_and_jacobian(u, u_range, e, log_d)
    np.testing.assert_allclose(moments[0, 0].numpy(), shape_of(u, 0.3, 1.2), rtol=1e-9)
    h = 1e-6
    for col, (de, dd) in enumerate(((h, 0.0), (0.0, h))):
        up = _shape_and_jacobian(u, u_range, e + de, log_d + dd)[0]
        down = _shape_and_jacobian(u, u_range, e - de, log_d - dd)[0]
        numeric = (up - down) / (2 * h)
        np.testing.assert_allclose(jac[..., col].numpy(), numeric.numpy(), rtol=1e-5)


def test_levenberg_marquardt_meets_a_reachable_target() -> None:
    u = u_of(2)
    target = torch.tensor(shape_of(u, -0.4, 0.8), dtype=torch.float64).expand(1, 2, 2)
    zeros = torch.zeros(1, 2, 1, dtype=torch.float64)
    start = Fit(
        zeros,
        zeros,
        torch.full((1, 2), math.inf, dtype=torch.float64),
        torch.zeros(1, 2, 2, dtype=torch.float64),
        torch.zeros(1, 2, 2, 2, dtype=torch.float64),
        torch.zeros(1, 2, 2, dtype=torch.float64),
    )
    valid = torch.tensor([[True, False]])
    fit = levenberg_marquardt(u, target, valid, (zeros, zeros), start, evals=30)
    np.testing.assert_allclose(
        fit.moments[0, 0].numpy(), target[0, 0].numpy(), atol=1e-4
    )
    assert float(fit.e[0, 0, 0]) == pytest.approx(-0.4, abs=1e-2)
    assert float(fit.log_d[0, 0, 0]) == pytest.approx(math.log(0.8), abs=1e-2)
    assert math.isinf(float(fit.cost[0, 1]))  # an invalid channel is never updated
    # a few more evaluations from there never make the fit worse
    again = levenberg_marquardt(u, target, valid, (fit.e, fit.log_d), fit, evals=3)
    assert float(again.cost[0, 0]) <= float(fit.cost[0, 0])
    far = levenberg_marquardt(u, target * 50, valid, (zeros, zeros), start, 20)
    assert abs(float(far.e[0, 0, 0])) <= EPSILON_MAX  # unreachable: within bounds


def test_shape_fit_budget_validation() -> None:
    assert ShapeFit(max_fit_pixels=None).max_fit_pixels is None
    for bad in ({"iters": -1}, {"refine_iters": 1.5}, {"iters": True}):
        with pytest.raises(ValueError, match="must be an int >= 0"):
            ShapeFit(**bad)
    with pytest.raises(ValueError, match="max_fit_pixels must be >= 16"):
        ShapeFit(max_fit_pixels=8)
