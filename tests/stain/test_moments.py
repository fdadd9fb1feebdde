"""Statistics (fedpath.stain.moments) and shape matching / restyling (shape)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import torch

from fedpath.stain.moments import (
    STAT_KINDS,
    STAT_NAMES,
    Moments,
    channel_moments,
    image_statistics,
)
from fedpath.stain.shape import (
    ACCURATE_FIT,
    ShapeFit,
    feasible_shape,
    fit_sinh_arcsinh,
    match_shape,
    restyle,
    sinh_arcsinh,
)


def non_gaussian(seed: int = 0, shape: tuple[int, ...] = (3, 4, 16, 16)) -> np.ndarray:
    """Gamma-, beta- and lognormal-distributed channels (skewed, heavy/light tails)."""
    rng = np.random.default_rng(seed)
    x = np.empty(shape)
    x[:, 0] = rng.gamma(2.0, size=x[:, 0].shape)
    x[:, 1] = rng.beta(0.5, 0.5, size=x[:, 1].shape)
    x[:, 2] = rng.beta(5.0, 1.5, size=x[:, 2].shape)
    x[:, 3:] = rng.lognormal(0.0, 0.6, size=x[:, 3:].shape)
    return x


def standardized(x: torch.Tensor) -> torch.Tensor:
    m = channel_moments(x)
    return (x - m.mean[..., None, None]) / m.std[..., None, None]


# ----------------------------------------------------------------------------------
# channel_moments / image_statistics


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 2e-4)])
def test_channel_moments_match_scipy(dtype: torch.dtype, tol: float) -> None:
    x = non_gaussian()
    m = channel_moments(torch.from_numpy(x).to(dtype))
    flat = x.reshape(x.shape[0], x.shape[1], -1)
    np.testing.assert_allclose(m.mean.double().numpy(), flat.mean(-1), atol=tol)
    np.testing.assert_allclose(m.std.double().numpy(), flat.std(-1), atol=tol)
    np.testing.assert_allclose(
        m.skewness.double().numpy(),
        scipy.stats.skew(flat, axis=-1, bias=True),
        atol=tol,
    )
    np.testing.assert_allclose(
        m.kurtosis.double().numpy(),
        scipy.stats.kurtosis(flat, axis=-1, fisher=True, bias=True),
        atol=5 * tol,
    )


def test_moments_tensor_round_trip() -> None:
    m = channel_moments(torch.from_numpy(non_gaussian()))
    t = m.as_tensor()
    assert t.shape == (3, 4, 4)
    back = Moments.from_tensor(t)
    for a, b in zip(
        (m.mean, m.std, m.skewness, m.kurtosis),
        (back.mean, back.std, back.skewness, back.kurtosis),
        strict=True,
    ):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match=r"\(\.\.\., 4\)"):
        Moments.from_tensor(torch.zeros(2, 3))


def test_constant_channels_are_neutral_and_finite() -> None:
    x = torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    x[0] = 1.0  # all-white patch
    x[1, 2] = 0.7  # one constant channel (0.7 is not exact in binary)
    x[2] = 0.0
    m = channel_moments(x)
    for field in (m.mean, m.std, m.skewness, m.kurtosis):
        assert torch.isfinite(field).all()
    for b, c in [(0, 0), (0, 1), (0, 2), (1, 2), (2, 0)]:
        assert m.std[b, c] == 0 and m.skewness[b, c] == 0 and m.kurtosis[b, c] == 0
    assert (m.std[3] > 0).all()
    for kind in STAT_KINDS:
        assert torch.isfinite(image_statistics(x, kind)).all(), kind  # type: ignore[arg-type]


def numpy_statistics(x: np.ndarray, kind: str, window: int = 8) -> np.ndarray:
    """Direct (looping) numpy reference for every statistic kind."""
    b, c, h, w = x.shape
    out = np.zeros((b, c, len(STAT_NAMES[kind])))
    for i in range(b):
        for j in range(c):
            v = x[i, j].ravel()
            if kind == "moments":
                out[i, j] = [
                    v.mean(),
                    v.std(),
                    scipy.stats.skew(v),
                    scipy.stats.kurtosis(v),
                ]
            elif kind == "mean_std":
                out[i, j] = [v.mean(), v.std()]
            elif kind == "quantile_cv":
                out[i, j] = [np.quantile(v, 0.9), v.std() / v.mean()]
            elif kind == "mean_iqr":
                q25, q75 = np.quantile(v, [0.25, 0.75])
                out[i, j] = [v.mean(), q75 - q25]
            elif kind == "skew_kurt":
                out[i, j] = [scipy.stats.skew(v), scipy.stats.kurtosis(v)]
            else:
                ws = min(window, h, w)
                means, mads = [], []
                for r in range(0, h - ws + 1, ws):
                    for s in range(0, w - ws + 1, ws):
                        tile = x[i, j, r : r + ws, s : s + ws].ravel()
                        means.append(tile.mean())
                        mads.append(np.median(np.abs(tile - np.median(tile))))
                out[i, j] = [np.mean(means), np.mean(mads)]
    return out


@pytest.mark.parametrize("kind", STAT_KINDS)
def test_image_statistics_match_numpy(kind: str) -> None:
    # 20 x 20 is not a multiple of the 8 x 8 window: the remainder is dropped.
    x = non_gaussian(1, (2, 4, 20, 20))
    got = image_statistics(torch.from_numpy(x), kind)  # type: ignore[arg-type]
    assert got.shape == (2, 4, len(STAT_NAMES[kind]))
    np.testing.assert_allclose(
        got.numpy(), numpy_statistics(x, kind), rtol=1e-9, atol=1e-9
    )


def test_local_statistics_window_option_and_small_images() -> None:
    x = non_gaussian(2, (2, 4, 12, 12))
    for window in (3, 4, 32):  # 32 > image side: one tile of the whole image
        got = image_statistics(torch.from_numpy(x), "local_mean_mad", window=window)
        np.testing.assert_allclose(
            got.numpy(), numpy_statistics(x, "local_mean_mad", window), atol=1e-12
        )


def test_bad_kind_and_shape_raise() -> None:
    with pytest.raises(ValueError, match="unknown statistic kind"):
        image_statistics(torch.rand(1, 3, 4, 4), "median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        channel_moments(torch.rand(3, 4, 4))


# ----------------------------------------------------------------------------------
# match_shape


def shape_batch(seed: int = 0) -> torch.Tensor:
    """Standardized, skewed, 32 x 32 channels (what match_shape receives)."""
    return standardized(torch.from_numpy(non_gaussian(seed, (6, 4, 32, 32))).float())


def test_match_shape_is_monotone_and_standardized() -> None:
    z = shape_batch()
    g = torch.Generator().manual_seed(1)
    ts = torch.rand(6, 4, generator=g) * 3 - 1.5
    tk = torch.rand(6, 4, generator=g) * 6 - 1
    y = match_shape(z, ts, tk)
    assert y.shape == z.shape and y.dtype == z.dtype and torch.isfinite(y).all()
    # For all pixel pairs z_i < z_j => y_i <= y_j: y is non-decreasing along z's order.
    order = z.flatten(2).argsort(dim=-1)
    y_sorted = y.flatten(2).gather(-1, order)
    assert (y_sorted.diff(dim=-1) >= 0).all()
    m = channel_moments(y)
    assert m.mean.abs().max() < 1e-5
    assert (m.std - 1).abs().max() < 1e-5


def test_match_shape_moves_toward_targets() -> None:
    z = shape_batch(1)
    m0 = channel_moments(z)
    g = torch.Generator().manual_seed(2)
    ts = torch.rand(6, 4, generator=g) * 2 - 1
    tk = 1.5 * ts**2 + torch.rand(6, 4, generator=g) * 3 - 0.5
    m1 = channel_moments(match_shape(z, ts, tk))
    # The fitting objective (kurtosis errors weighted by 1/2) never increases.
    before = (m0.skewness - ts) ** 2 + (0.5 * (m0.kurtosis - tk)) ** 2
    after = (m1.skewness - ts) ** 2 + (0.5 * (m1.kurtosis - tk)) ** 2
    assert (after <= before + 1e-6).all()  # best-so-far: never worse
    assert (after < before).float().mean() > 0.9  # strictly better for most


def test_match_shape_hits_reachable_targets() -> None:
    # Targets generated by a sinh-arcsinh map inside the parameter bounds are
    # reachable by construction.
    z = shape_batch(2)
    g = torch.Generator().manual_seed(3)
    eps0 = torch.rand(6, 4, generator=g) * 1.2 - 0.6
    delta0 = torch.exp(torch.rand(6, 4, generator=g) * 1.0 - 0.5)
    target = channel_moments(sinh_arcsinh(z, eps0, delta0))
    m = channel_moments(
        match_shape(z, target.skewness, target.kurtosis, shape_fit=ShapeFit(iters=12))
    )
    assert (m.skewness - target.skewness).abs().max() < 2e-2
    assert (m.kurtosis - target.kurtosis).abs().max() < 5e-2


def test_match_shape_subsampled_fit_matches_full_fit() -> None:
    # 64 x 64 = 4096 pixels > max_fit_pixels=1024: coarse fit on a stride-4
    # subsample, then refinement on all pixels. Moderate tails: with excess
    # kurtosis >~ 10 a small subsample's moments are too noisy for that.
    z = standardized(torch.from_numpy(non_gaussian(9, (2, 4, 64, 64))).float())
    z = z[:, :3]
    g = torch.Generator().manual_seed(5)
    eps0 = torch.rand(2, 3, generator=g) * 0.8 - 0.4
    delta0 = torch.exp(torch.rand(2, 3, generator=g) * 0.5 - 0.5)
    t = channel_moments(sinh_arcsinh(z, eps0, delta0))
    y = match_shape(z, t.skewness, t.kurtosis, shape_fit=ShapeFit(max_fit_pixels=1024))
    m = channel_moments(y)
    # The default single refinement step closes most of the subsampling gap ...
    assert (m.skewness - t.skewness).abs().max() < 0.05
    assert (m.kurtosis - t.kurtosis).abs().max() < 0.1
    order = z.flatten(2).argsort(dim=-1)
    assert (y.flatten(2).gather(-1, order).diff(dim=-1) >= 0).all()
    # ... and two close it.
    e, d, achieved = fit_sinh_arcsinh(
        z,
        t.skewness,
        t.kurtosis,
        shape_fit=ShapeFit(max_fit_pixels=1024, refine_iters=3),
    )
    m3 = channel_moments(sinh_arcsinh(z, e, d))
    torch.testing.assert_close(m3.skewness, achieved[..., 0], atol=1e-4, rtol=1e-4)
    assert (m3.skewness - t.skewness).abs().max() < 1e-2
    assert ((m3.kurtosis - t.kurtosis) / (1 + t.kurtosis.abs())).abs().max() < 1e-2


def test_shape_fit_budget_defaults_and_validation() -> None:
    # The library default is the accurate fit; FedStain's cheaper training budget
    # is its own config (FedStainParams.shape_*), documented on ShapeFit.
    assert ACCURATE_FIT == ShapeFit() == ShapeFit(8, 4096, 2)
    z = shape_batch(4)
    ts, tk = torch.full((6, 4), 0.8), torch.full((6, 4), 1.5)
    torch.testing.assert_close(
        match_shape(z, ts, tk),
        match_shape(z, ts, tk, shape_fit=ShapeFit(8, 4096, 2)),
        rtol=0,
        atol=0,
    )
    # 0 refinement steps after a subsampled fit: the coarse fit's own moments
    e, d, achieved = fit_sinh_arcsinh(
        z, ts, tk, shape_fit=ShapeFit(iters=3, max_fit_pixels=64, refine_iters=0)
    )
    sub = z.flatten(2)[..., ::16]  # 32 x 32 = 1024 pixels, every 16th: 64
    coarse = channel_moments(sinh_arcsinh(sub.unsqueeze(2), e, d))
    torch.testing.assert_close(coarse.skewness, achieved[..., 0], atol=1e-4, rtol=1e-4)
    for bad in ({"iters": -1}, {"refine_iters": 1.5}, {"iters": True}):
        with pytest.raises(ValueError, match="must be an int >= 0"):
            ShapeFit(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_fit_pixels must be >= 16"):
        ShapeFit(max_fit_pixels=8)
    assert ShapeFit(max_fit_pixels=None).max_fit_pixels is None


def test_match_shape_strength_interpolates() -> None:
    z = shape_batch(3)
    m0 = channel_moments(z)
    g = torch.Generator().manual_seed(4)
    eps0 = torch.rand(6, 4, generator=g) * 1.2 - 0.6
    delta0 = torch.exp(torch.rand(6, 4, generator=g) * 1.0 - 0.5)
    t = channel_moments(sinh_arcsinh(z, eps0, delta0))
    same = match_shape(z, t.skewness, t.kurtosis, strength=0.0)
    torch.testing.assert_close(same, z, atol=1e-5, rtol=0)
    half = channel_moments(match_shape(z, t.skewness, t.kurtosis, strength=0.5))
    mid_s = (m0.skewness + t.skewness) / 2
    mid_k = (m0.kurtosis + t.kurtosis) / 2
    assert (half.skewness - mid_s).abs().max() < 1e-2
    assert (half.kurtosis - mid_k).abs().max() < 2e-2


def test_feasible_shape_projection() -> None:
    skew = torch.tensor([0.0, 1.0, -3.0, 2.0, 0.5])
    kurt = torch.tensor([0.0, 3.0, -2.6, 0.0, -2.5])
    s, k = feasible_shape(skew, kurt)
    assert (k >= s**2 - 2.0 + 0.2 - 1e-6).all()
    torch.testing.assert_close(s[:2], skew[:2])  # feasible pairs are unchanged
    torch.testing.assert_close(k[:2], kurt[:2])
    assert (s[2:].abs() <= skew[2:].abs()).all() and (k[2:] >= kurt[2:]).all()


def test_match_shape_degenerate_and_infeasible_inputs_are_finite() -> None:
    z = torch.zeros(2, 3, 8, 8)
    z[1, 0] = torch.linspace(-1, 1, 64).view(8, 8)
    y = match_shape(z, torch.full((2, 3), 5.0), torch.full((2, 3), -3.0))  # infeasible
    assert torch.isfinite(y).all()
    assert torch.equal(y[0], torch.zeros(3, 8, 8))
    two_valued = torch.where(torch.rand(1, 1, 8, 8) < 0.3, 1.0, -1.0)
    assert torch.isfinite(match_shape(two_valued, 2.0, 10.0)).all()
    with pytest.raises(ValueError, match="non-finite"):
        match_shape(z, float("nan"), 0.0)


def test_match_shape_passes_gradients() -> None:
    z = shape_batch(4).requires_grad_(True)
    y = match_shape(z, 0.5, 1.0)
    (y * torch.randn_like(y)).sum().backward()
    assert z.grad is not None and torch.isfinite(z.grad).all()


# ----------------------------------------------------------------------------------
# restyle


@pytest.mark.parametrize(
    "kind", ["mean_std", "mean_iqr", "local_mean_mad", "quantile_cv"]
)
def test_restyle_affine_kinds_hit_targets(kind: str) -> None:
    x = torch.from_numpy(non_gaussian(5, (3, 4, 16, 16)))
    ref = torch.from_numpy(non_gaussian(6, (3, 4, 16, 16))) * 0.5 + 0.2
    target = image_statistics(ref, kind)  # type: ignore[arg-type]
    y = restyle(x, None, target, kind)  # type: ignore[arg-type]
    torch.testing.assert_close(image_statistics(y, kind), target, atol=1e-9, rtol=1e-9)  # type: ignore[arg-type]
    # Affine with a positive gain: pixel order is kept.
    order = x.flatten(2).argsort(dim=-1)
    assert (y.flatten(2).gather(-1, order).diff(dim=-1) >= 0).all()


def test_restyle_shape_kinds() -> None:
    x = torch.from_numpy(non_gaussian(7, (3, 4, 32, 32))).float()
    ref = torch.from_numpy(non_gaussian(8, (3, 4, 32, 32))).float().flip(0) * 2 + 1
    target = image_statistics(ref, "moments")
    src = image_statistics(x, "moments")
    y = restyle(x, None, target, "moments")
    got = image_statistics(y, "moments")
    torch.testing.assert_close(got[..., :2], target[..., :2], atol=1e-4, rtol=1e-4)
    assert (
        (got[..., 2:] - target[..., 2:]).norm(dim=-1)
        <= (src[..., 2:] - target[..., 2:]).norm(dim=-1) + 1e-5
    ).all()
    y2 = restyle(x, None, target[..., 2:], "skew_kurt")
    got2 = image_statistics(y2, "moments")
    torch.testing.assert_close(got2[..., :2], src[..., :2], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got2[..., 2:], got[..., 2:], atol=1e-3, rtol=1e-3)


def test_restyle_constant_source_and_bad_shapes() -> None:
    x = torch.ones(2, 3, 8, 8)
    for kind in STAT_KINDS:
        k = len(STAT_NAMES[kind])
        target = torch.full((2, 3, k), 0.5)
        y = restyle(x, None, target, kind)  # type: ignore[arg-type]
        assert torch.isfinite(y).all(), kind
    with pytest.raises(ValueError, match="target_stats"):
        restyle(x, None, torch.zeros(2, 3, 3), "mean_std")
    with pytest.raises(ValueError, match="non-finite"):
        restyle(x, None, torch.full((2, 3, 2), float("nan")), "mean_std")
