"""RandStain, MixStyle and AugMix (fedpath.stain.randstain / mixstyle / augmix)."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
import torch

from fedpath.data.synthetic_render import make_hospital_profiles, render_patches
from fedpath.stain import (
    STAT_KINDS,
    StatPool,
    augmix,
    channel_moments,
    image_statistics,
    mixstyle,
    mixstyle_features,
    randstain,
    randstain_in_space,
    to_space,
)
from fedpath.stain._random import randint, sample_beta, sample_dirichlet


@cache
def _patches() -> torch.Tensor:
    """24 H&E-like 32x32 patches from three synthetic hospitals."""
    profiles = make_hospital_profiles(3, seed=0)
    labels = np.arange(8) % 2
    arr = np.concatenate([render_patches(labels, p, 32, seed=2) for p in profiles])
    return torch.from_numpy(arr).float() / 255.0


def images() -> torch.Tensor:
    """8 patches to augment (hospital 0)."""
    return _patches()[:8].clone()


def pool(space: str = "lab", kind: str = "moments") -> StatPool:
    """Statistics of the other hospitals' 16 patches."""
    return StatPool.from_images(_patches()[8:], space, kind)  # type: ignore[arg-type]


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------------
# random helpers


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


# ----------------------------------------------------------------------------------
# StatPool


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


# ----------------------------------------------------------------------------------
# RandStain


def test_randstain_output_range_probability_and_determinism() -> None:
    x, p = images(), pool()
    out = randstain(x, p, gen(), p=0.9)
    assert out.shape == x.shape and torch.isfinite(out).all()
    assert out.min() >= 0 and out.max() <= 1
    assert torch.equal(randstain(x, p, gen(), p=0.0), x)
    always = randstain(x, p, gen(5), p=1.0)
    assert ((always - x).abs().flatten(1).amax(1) > 0.01).all()
    assert torch.equal(randstain(x, p, gen(9)), randstain(x, p, gen(9)))
    assert not torch.equal(randstain(x, p, gen(9)), randstain(x, p, gen(10)))


def test_randstain_moves_lab_moments_to_the_templates() -> None:
    x, p = images(), pool()
    targets = p.sample(8, gen(4), "direct")  # randstain draws the templates first
    out = randstain(x, p, gen(4), p=1.0, mode="direct")
    before = image_statistics(to_space(x, "lab"), "moments")
    after = image_statistics(to_space(out, "lab"), "moments")
    d_before = (before[..., 0] - targets[..., 0]).abs()
    d_after = (after[..., 0] - targets[..., 0]).abs()
    # The final gamut clamp moves things a little, but the means land near the
    # templates (LAB units) and much closer than they started.
    assert float((d_after < d_before).float().mean()) > 0.8
    assert float(d_after.median()) < 2.0


def test_randstain_in_space_is_exact_and_monotone() -> None:
    x, p = images(), pool()
    y = to_space(x, "lab")
    # Real pool entries: jointly plausible (feasible) skewness/kurtosis pairs.
    targets = p.sample(8, gen(6), "direct")
    out = randstain_in_space(y, targets)
    mom = image_statistics(out, "moments")
    src = image_statistics(y, "moments")
    torch.testing.assert_close(mom[..., :2], targets[..., :2], atol=1e-3, rtol=1e-4)
    # match_shape's objective weighs kurtosis errors by 1/2; it never increases.
    w = torch.tensor([1.0, 0.5])
    shape_before = ((src[..., 2:] - targets[..., 2:]) * w).norm(dim=-1)
    shape_after = ((mom[..., 2:] - targets[..., 2:]) * w).norm(dim=-1)
    assert (shape_after <= shape_before + 1e-4).all()
    assert float((shape_after < 0.5 * shape_before).float().mean()) > 0.6
    # Pixel order within each channel is preserved (before the clamp/convert).
    order = y.flatten(2).argsort(dim=-1)
    assert (out.flatten(2).gather(-1, order).diff(dim=-1) >= 0).all()
    low = randstain_in_space(y, targets, higher_order=False)
    torch.testing.assert_close(
        image_statistics(low, "mean_std"), targets[..., :2], atol=1e-3, rtol=1e-4
    )
    literal = randstain_in_space(y, targets, higher_order=False, reading="paper")
    expected_std = src[..., 1] * targets[..., 1]
    torch.testing.assert_close(
        channel_moments(literal).std, expected_std, rtol=1e-3, atol=1e-3
    )


def test_randstain_spaces_and_errors() -> None:
    x = images()
    for space in ("rgb", "lab", "hed"):
        out = randstain(x, pool(space), gen(), p=1.0)
        assert torch.isfinite(out).all() and out.min() >= 0 and out.max() <= 1
    with pytest.raises(ValueError, match="differs from the pool"):
        randstain(x, pool("lab"), gen(), space="hed")
    with pytest.raises(TypeError, match="Generator"):
        randstain(x, pool(), None)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------
# MixStyle


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


# ----------------------------------------------------------------------------------
# AugMix


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


# ----------------------------------------------------------------------------------
# everything on white patches


def test_all_ops_on_white_images() -> None:
    white = torch.ones(32, 3, 32, 32)
    p_lab, p_rgb = pool("lab"), pool("rgb")
    white_pool = StatPool.from_images(white[:4], "lab")  # degenerate pool entries
    outs = [
        randstain(white, p_lab, gen(), p=1.0),
        randstain(white, white_pool, gen(), p=1.0),
        randstain(images(), white_pool, gen(), p=1.0),
        mixstyle(white, p_rgb, gen()),
        mixstyle(white, p_rgb, gen(), mode="paper"),
        augmix(white, gen()),
        mixstyle_features(white, gen(), p=1.0, higher_order=True),
    ]
    outs += [
        mixstyle(white, pool("rgb", kind), gen(), kind=kind)  # type: ignore[arg-type]
        for kind in STAT_KINDS
    ]
    for out in outs:
        assert torch.isfinite(out).all()
    torch.testing.assert_close(outs[1], white, atol=1e-5, rtol=0)  # white -> white
    torch.testing.assert_close(outs[5], white)


def test_shape_fit_budget_reaches_the_shape_step_only() -> None:
    from fedpath.stain.shape import ACCURATE_FIT, ShapeFit

    x, p = images(), pool()
    y = to_space(x, "lab")
    targets = p.sample(8, gen(6), "direct")
    cheap = ShapeFit(iters=1, max_fit_pixels=64, refine_iters=0)  # FedStain-like
    exact = randstain_in_space(y, targets)
    assert torch.equal(exact, randstain_in_space(y, targets, shape_fit=ACCURATE_FIT))
    rough = randstain_in_space(y, targets, shape_fit=cheap)
    assert not torch.equal(rough, exact)
    # the mean and std are matched whatever the budget; the shape less closely
    torch.testing.assert_close(
        image_statistics(rough, "mean_std"), targets[..., :2], atol=1e-3, rtol=1e-4
    )

    def shape_error(out: torch.Tensor) -> float:
        return float(
            (image_statistics(out, "moments")[..., 2:] - targets[..., 2:]).abs().mean()
        )

    assert shape_error(exact) <= shape_error(rough)
    # without the higher-order step the budget has nothing to act on
    assert torch.equal(
        randstain_in_space(y, targets, higher_order=False),
        randstain_in_space(y, targets, higher_order=False, shape_fit=cheap),
    )
    assert torch.equal(
        mixstyle(x, pool("rgb", "mean_std"), gen(1), alpha=0.5),
        mixstyle(x, pool("rgb", "mean_std"), gen(1), alpha=0.5, shape_fit=cheap),
    )
    assert not torch.equal(
        mixstyle(x, pool("rgb"), gen(1), alpha=0.5),
        mixstyle(x, pool("rgb"), gen(1), alpha=0.5, shape_fit=cheap),
    )
