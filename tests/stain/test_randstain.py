"""Level-1 RandStain (fedpath.stain.randstain).

A pool of one Table V pair imposes that pair and nothing else: FedStain Table V
compares which statistics the clients exchange; a row that exchanges mean/std only
must not reshape skewness/kurtosis, and one that exchanges skewness/kurtosis only
must not shift mean/std. Those checks look at what RandStain computes in the
colour space, before the gamut clamp to RGB [0, 1] (shared by every pool kind,
and not part of the statistic transfer)."""

from __future__ import annotations

import importlib

import pytest
import torch

from fedpath.stain import (
    ACCURATE_FIT,
    StatKind,
    StatPool,
    channel_moments,
    image_statistics,
    mixstyle,
    randstain,
    randstain_in_space,
    restyle,
    to_space,
)
from tests.stain.helpers import gen, images, pool


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


# Tolerance for a statistic RandStain must leave as it is, relative to
# (1 + |value|): every statistic is a mean over a channel's 1024 pixels, computed
# two-pass in float32 (epsilon 1.2e-7); the transfer and the re-measurement move
# it by ~1e-6 of (1 + |value|). 1e-4 is ~10x above that and ~1000x below what the
# excluded step moves (skewness by ~0.4, LAB means by ~10 units, at the median).
KEEP = 1e-4


def assert_kept(before: torch.Tensor, after: torch.Tensor) -> None:
    moved = (after - before).abs()
    assert bool((moved <= KEEP * (1 + before.abs())).all()), float(moved.max())


def restained(
    monkeypatch: pytest.MonkeyPatch, x: torch.Tensor, p: StatPool, **kw: object
) -> torch.Tensor:
    """RandStain's result for every image (p = 1), in the pool's colour space."""
    module = importlib.import_module("fedpath.stain.randstain")
    seen: list[torch.Tensor] = []
    real = module.from_space

    def spy(y: torch.Tensor, space: str) -> torch.Tensor:
        seen.append(y.clone())
        return real(y, space)

    monkeypatch.setattr(module, "from_space", spy)
    randstain(x, p, gen(4), p=1.0, mode="direct", **kw)  # type: ignore[arg-type]
    monkeypatch.undo()
    assert len(seen) == 1 and seen[0].shape == x.shape
    return seen[0]


def test_mean_std_pool_is_an_affine_map_per_channel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x, p = images(), pool("lab", "mean_std")
    targets = p.sample(8, gen(4), "direct")  # randstain draws the templates first
    y = to_space(x, "lab")
    out = restained(monkeypatch, x, p)
    a, b = channel_moments(y), channel_moments(out)
    # Reinhard / RandStainNA: (y - mean) / std * std' + mean'
    expected = (y - a.mean[..., None, None]) / a.std[..., None, None] * targets[
        ..., 1, None, None
    ] + targets[..., 0, None, None]
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(image_statistics(out, "mean_std"), targets)
    # an affine map leaves standardized skewness and kurtosis where they were
    assert_kept(a.skewness, b.skewness)
    assert_kept(a.kurtosis, b.kurtosis)
    # there is no shape step to switch: higher_order does not matter
    torch.testing.assert_close(restained(monkeypatch, x, p, higher_order=False), out)
    # Eq. 1's literal reading (output std = std * std') stays available
    literal = restained(monkeypatch, x, p, reading="paper")
    torch.testing.assert_close(
        channel_moments(literal).std, a.std * targets[..., 1], rtol=1e-3, atol=1e-3
    )


def test_skew_kurt_pool_only_reshapes(monkeypatch: pytest.MonkeyPatch) -> None:
    x, p = images(), pool("lab", "skew_kurt")
    targets = p.sample(8, gen(4), "direct")
    y = to_space(x, "lab")
    out = restained(monkeypatch, x, p)
    a, b = channel_moments(y), channel_moments(out)
    assert_kept(a.mean, b.mean)
    assert_kept(a.std, b.std)
    # the shape moves toward the template (match_shape weighs kurtosis by 1/2)
    w = torch.tensor([1.0, 0.5])
    src = torch.stack((a.skewness, a.kurtosis), dim=-1)
    got = torch.stack((b.skewness, b.kurtosis), dim=-1)
    before = ((src - targets) * w).norm(dim=-1)
    after = ((got - targets) * w).norm(dim=-1)
    assert bool((after <= before + 1e-4).all())
    assert float((after < 0.5 * before).float().mean()) > 0.5
    # monotone per channel: pixel order kept
    order = y.flatten(2).argsort(dim=-1)
    assert bool((out.flatten(2).gather(-1, order).diff(dim=-1) >= -1e-4).all())


@pytest.mark.parametrize("kind", ["quantile_cv", "local_mean_mad", "mean_iqr"])
def test_other_pairs_apply_their_own_transfer(
    monkeypatch: pytest.MonkeyPatch, kind: StatKind
) -> None:
    x, p = images(), pool("lab", kind)
    targets = p.sample(8, gen(4), "direct")
    y = to_space(x, "lab")
    out = restained(monkeypatch, x, p)
    ref = restyle(y, None, targets, kind, shape_fit=ACCURATE_FIT)
    torch.testing.assert_close(out, ref)
    # all three transfers are affine per channel: the shape is not touched
    a, b = channel_moments(y), channel_moments(out)
    assert_kept(a.skewness, b.skewness)
    assert_kept(a.kurtosis, b.kurtosis)
    if kind != "quantile_cv":  # exact by construction (restyle's docstring)
        torch.testing.assert_close(
            image_statistics(out, kind), targets, rtol=1e-3, atol=1e-3
        )


def test_pair_pools_reject_what_they_cannot_do() -> None:
    x = images()
    with pytest.raises(ValueError, match="higher_order=False"):
        randstain(x, pool("lab", "skew_kurt"), gen(), higher_order=False)
    for kind in ("skew_kurt", "mean_iqr"):
        with pytest.raises(ValueError, match="reading='paper'"):
            randstain(x, pool("lab", kind), gen(), reading="paper")


def test_randstain_on_white_images_and_white_pools_is_finite() -> None:
    white = torch.ones(32, 3, 32, 32)
    white_pool = StatPool.from_images(white[:4], "lab")  # degenerate pool entries
    outs = [
        randstain(white, pool("lab"), gen(), p=1.0),
        randstain(white, white_pool, gen(), p=1.0),
        randstain(images(), white_pool, gen(), p=1.0),
    ]
    for out in outs:
        assert torch.isfinite(out).all()
    torch.testing.assert_close(outs[1], white, atol=1e-5, rtol=0)  # white -> white
