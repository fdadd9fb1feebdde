"""The statistics pool and its template draws (fedpath.stain.pool)."""

from __future__ import annotations

import pytest
import torch

from fedpath.stain import (
    StatPool,
)
from tests.stain.helpers import gen, pool


def test_pool_validation_errors() -> None:
    with pytest.raises(ValueError, match="empty statistics pool"):
        StatPool(torch.zeros(0, 3, 4))
    bad = pool().stats.clone()
    bad[3, 1, 2] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        StatPool(bad)
    with pytest.raises(ValueError, match=r"\(P, C, 4\)"):
        StatPool(torch.zeros(5, 3, 2))
    with pytest.raises(ValueError, match="std_hyper"):
        StatPool(pool().stats, std_hyper=-1.5)
    with pytest.raises(ValueError, match="unknown colour space"):
        StatPool(pool().stats, space="hsv")  # type: ignore[arg-type]


def test_pool_sampling_modes() -> None:
    p = pool()
    assert len(p) == 16 and p.loc.shape == (3, 4) and p.scale.shape == (3, 4)
    direct = p.sample(50, gen(), mode="direct")
    # Every direct draw is one of the pool's rows.
    match = (direct[:, None] == p.stats[None]).flatten(2).all(-1).any(-1)
    assert match.all()
    for dist in ("normal", "laplace"):
        p.fit(distribution=dist, std_hyper=-0.3)
        fitted = p.sample(4000, gen(1))
        assert fitted.shape == (4000, 3, 4) and torch.isfinite(fitted).all()
        assert (fitted[..., 1] > 0).all()  # std draws clipped positive
        torch.testing.assert_close(
            fitted.mean(0), p.loc, atol=0.1 * float(p.scale.max()), rtol=0
        )
        ratio = fitted.std(0) / (p.scale * 0.7)
        assert ((ratio[:, [0, 2, 3]] - 1).abs() < 0.1).all()
    assert torch.equal(p.sample(5, gen(3)), p.sample(5, gen(3)))
    with pytest.raises(ValueError, match="mode"):
        p.sample(2, gen(), mode="median")  # type: ignore[arg-type]
