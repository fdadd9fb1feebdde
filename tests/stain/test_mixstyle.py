"""MixStyle on images and feature maps, with higher-order statistics
(fedpath.stain.mixstyle).

:func:`mix_feature_statistics` is what FedStain's ``mixstyle_level: features``
applies after its encoder stages: each row's feature statistics move to
``lam * own + (1 - lam) * partner``."""

from __future__ import annotations

import pytest
import torch

from fedpath.stain import (
    STAT_KINDS,
    channel_moments,
    image_statistics,
    mixstyle,
    mixstyle_features,
)
from fedpath.stain._random import randint, sample_beta
from fedpath.stain.mixstyle import mix_feature_statistics
from fedpath.stain.shape import ACCURATE_FIT
from tests.stain.helpers import gen, images, pool


def test_mixstyle_modes_differ_and_are_deterministic() -> None:
    x, p = images(), pool("rgb")
    sound = mixstyle(x, p, gen(1), alpha=0.5)
    paper = mixstyle(x, p, gen(1), alpha=0.5, mode="paper")
    for out in (sound, paper):
        assert torch.isfinite(out).all() and out.min() >= 0 and out.max() <= 1
    assert (sound - paper).abs().mean() > 0.05
    assert torch.equal(sound, mixstyle(x, p, gen(1), alpha=0.5))
    assert not torch.equal(sound, mixstyle(x, p, gen(2), alpha=0.5))


def test_mixstyle_lambda_limits() -> None:
    # alpha -> 0 puts lambda at ~0 (pool style) or ~1 (own style) for every sample.
    x, p = images(), pool("rgb")
    alpha = 1e-3
    g = gen(3)
    entry = p.stats[randint(len(p), (8,), g)]
    lam = sample_beta(alpha, alpha, (8,), g)
    assert ((lam < 1e-6) | (lam > 1 - 1e-6)).all()
    out = mixstyle(x, p, gen(3), alpha=alpha)
    got = image_statistics(out, "moments")
    for i in range(8):
        if lam[i] > 0.5:  # own style: near-identity
            assert (out[i] - x[i]).abs().max() < 1e-3
        else:  # the pool entry's style, up to the [0, 1] clamp (which lowers std)
            own = image_statistics(x[i : i + 1], "moments")[0]
            assert (got[i, :, 0] - entry[i, :, 0]).abs().max() < 0.05
            # clamping can only shrink the spread; it must still have moved from
            # the image's own std to (at most) the entry's
            assert (got[i, :, 1] <= entry[i, :, 1] + 0.01).all()
            moved = (got[i, :, 1] - entry[i, :, 1]).abs()
            assert (moved <= (own[:, 1] - entry[i, :, 1]).abs() + 1e-3).all()
    assert bool((lam > 0.5).any()) and bool((lam < 0.5).any())


@pytest.mark.parametrize("kind", STAT_KINDS)
def test_mixstyle_table_v_kinds(kind: str) -> None:
    x = images()
    out = mixstyle(x, pool("rgb", kind), gen(), alpha=0.5, kind=kind)  # type: ignore[arg-type]
    assert torch.isfinite(out).all() and out.min() >= 0 and out.max() <= 1
    assert (out - x).abs().max() > 1e-3


def test_mixstyle_errors() -> None:
    with pytest.raises(ValueError, match="paper"):
        mixstyle(images(), pool("rgb", "mean_std"), gen(), mode="paper")
    with pytest.raises(ValueError, match="pool holds"):
        mixstyle(images(), pool("rgb"), gen(), space="lab")


def test_mixstyle_features() -> None:
    f = torch.randn(6, 8, 5, 5, generator=gen()) * 2 + 1
    assert mixstyle_features(f, gen(), p=0.0) is f
    out = mixstyle_features(f, gen(), p=1.0)
    assert out.shape == f.shape and not torch.equal(out, f)
    # Mixing identical styles is the identity.
    same = f[:1].expand(6, -1, -1, -1).contiguous()
    torch.testing.assert_close(mixstyle_features(same, gen(), p=1.0), same)
    torch.testing.assert_close(
        mixstyle_features(same, gen(), p=1.0, higher_order=True),
        same,
        atol=1e-4,
        rtol=1e-4,
    )
    assert torch.equal(
        mixstyle_features(f, gen(4), p=1.0), mixstyle_features(f, gen(4), p=1.0)
    )
    leaf = f.clone().requires_grad_(True)
    mixstyle_features(leaf, gen(), p=1.0, higher_order=True).square().sum().backward()
    assert leaf.grad is not None and torch.isfinite(leaf.grad).all()


def maps(seed: int, b: int = 6, c: int = 5, h: int = 7, w: int = 7) -> torch.Tensor:
    """Feature-like maps: right-skewed values (log-normal, skewness ~1.3) with a
    per-(row, channel) location and scale."""
    g = torch.Generator().manual_seed(seed)
    base = (0.4 * torch.randn(b, c, h, w, generator=g)).exp()
    scale = torch.rand(b, c, 1, 1, generator=g) * 3 + 0.5
    shift = torch.randn(b, c, 1, 1, generator=g) * 2
    return base * scale + shift


def test_mean_std_mix_is_zhou_mixstyle_toward_the_partner() -> None:
    f, partner = maps(0), maps(1, h=5, w=9)  # partner may have another size
    lam = torch.tensor([0.0, 0.25, 0.5, 0.75, 0.3, 1.0])
    out = mix_feature_statistics(f, partner, lam, "mean_std")
    a, p, o = channel_moments(f), channel_moments(partner), channel_moments(out)
    lam2 = lam[:, None]
    torch.testing.assert_close(o.mean, lam2 * a.mean + (1 - lam2) * p.mean)
    torch.testing.assert_close(o.std, lam2 * a.std + (1 - lam2) * p.std)
    # affine per channel: the shape (skewness, kurtosis) stays the row's own
    torch.testing.assert_close(o.skewness, a.skewness, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(o.kurtosis, a.kurtosis, atol=1e-3, rtol=1e-3)
    # a row with lam = 1 keeps its style and is returned exactly
    assert torch.equal(out[5], f[5])


def test_moments_mix_moves_all_four_toward_the_mixed_target() -> None:
    f = maps(2)
    partner = -maps(3)  # left-skewed partner: skewness of the opposite sign
    lam = torch.zeros(6)  # fully the partner's statistics
    out = mix_feature_statistics(f, partner, lam, "moments", ACCURATE_FIT)
    a, p, o = channel_moments(f), channel_moments(partner), channel_moments(out)
    torch.testing.assert_close(o.mean, p.mean, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(o.std, p.std, atol=1e-4, rtol=1e-4)
    before = (a.skewness - p.skewness).abs()
    after = (o.skewness - p.skewness).abs()
    assert bool((after < before).all())
    assert float(after.median()) < 0.5 * float(before.median())
    # pixel order (the "content" of each channel) is preserved: monotone map
    order_f = f.flatten(2).argsort(-1)
    order_o = out.flatten(2).argsort(-1)
    assert float((order_f == order_o).float().mean()) > 0.99


def test_mixing_identical_styles_is_the_identity() -> None:
    f = maps(4)
    lam = torch.full((6,), 0.4)
    for kind in ("mean_std", "moments"):
        out = mix_feature_statistics(f, f.clone(), lam, kind)
        torch.testing.assert_close(out, f, atol=1e-4, rtol=1e-4)


def test_gradients_reach_the_maps_not_the_partners() -> None:
    f = maps(5).requires_grad_(True)
    partner = maps(6).requires_grad_(True)
    lam = torch.tensor([0.1, 0.9, 0.5, 0.0, 0.3, 0.7])
    mix_feature_statistics(f, partner, lam, "moments").square().sum().backward()
    assert f.grad is not None and bool(torch.isfinite(f.grad).all())
    assert float(f.grad.abs().sum()) > 0
    assert partner.grad is None


def test_only_the_mixed_rows_change_and_no_row_mixed_returns_f() -> None:
    f, partner = maps(7), maps(8)
    lam = torch.tensor([1.0, 0.2, 1.0, 0.6, 1.0, 0.0])
    out = mix_feature_statistics(f, partner, lam, "mean_std")
    keep = lam >= 1.0 - 1e-3
    assert torch.equal(out[keep], f[keep])
    assert not torch.equal(out[~keep], f[~keep])
    assert mix_feature_statistics(f, partner, torch.ones(6), "moments") is f


def test_mix_feature_statistics_errors() -> None:
    f = maps(9)
    with pytest.raises(ValueError, match="partner must have shape"):
        mix_feature_statistics(f, maps(9, c=4), torch.zeros(6))
    with pytest.raises(ValueError, match="lam must have shape"):
        mix_feature_statistics(f, maps(10), torch.zeros(5))
    with pytest.raises(ValueError, match="floating"):
        mix_feature_statistics(f[:, :, 0], maps(10), torch.zeros(6))


def test_mixstyle_on_white_images_is_finite() -> None:
    white = torch.ones(32, 3, 32, 32)
    p_rgb = pool("rgb")
    outs = [
        mixstyle(white, p_rgb, gen()),
        mixstyle(white, p_rgb, gen(), mode="paper"),
        mixstyle_features(white, gen(), p=1.0, higher_order=True),
    ]
    outs += [
        mixstyle(white, pool("rgb", kind), gen(), kind=kind)  # type: ignore[arg-type]
        for kind in STAT_KINDS
    ]
    for out in outs:
        assert torch.isfinite(out).all()
