"""Per-channel moments and the Table V statistic pairs (fedpath.stain.moments)."""

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
from tests.stain.helpers import non_gaussian

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
