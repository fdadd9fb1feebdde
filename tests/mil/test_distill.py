"""FedHD distillation: the alignment loss, its optimisation and the ablations."""

from __future__ import annotations

import pytest
import torch

from fedpath.mil.bags import SlideBag, synthetic_bags
from fedpath.mil.distill import (
    DistillOptions,
    compress_slides,
    distill_features,
    distill_slide,
    distill_slides,
)
from fedpath.mil.gmm import fit_gmm
from tests.mil_helpers import blobs


def test_distillation_aligns_every_component() -> None:
    x = blobs(n=800, d=4).float()
    g = fit_gmm(x, 4)
    res = distill_features(x, DistillOptions(tokens=400, iters=300), gmm=g, seed=0)
    assert res.tokens.shape == (400, 4) and len(res.losses) == 301
    assert res.losses[-1] < 1e-3 * res.losses[0] + 1e-4
    assert res.losses[-1] <= min(res.losses[:10])
    for m in range(4):
        y = res.tokens[res.assignment == m].double()
        mu, cov = g.means[m].double(), g.covs[m].double()
        assert float((y.mean(0) - mu).norm()) < 1e-2 * float(mu.norm() + 1)
        sigma = torch.cov(y.T, correction=0)
        assert float((sigma - cov).norm()) < 0.02 * float(cov.norm())
    # the tokens are a new sample, not copies of real patches
    assert float(torch.cdist(res.tokens, x).min()) > 1e-4


def test_mean_mode_matches_only_the_mean_and_single_mode_one_gaussian() -> None:
    x = blobs(n=800, d=6).float()
    cov_real = torch.cov(x.T, correction=0)
    mean_res = distill_features(x, DistillOptions(mode="mean", tokens=300, iters=200))
    assert float((mean_res.tokens.mean(0) - x.mean(0)).norm()) < 1e-2
    cov_mean = torch.cov(mean_res.tokens.T, correction=0)
    assert float((cov_mean - cov_real).norm()) > 0.5 * float(cov_real.norm())
    single = distill_features(x, DistillOptions(mode="single", tokens=300, iters=200))
    assert single.target.num_components == 1
    assert float((single.tokens.mean(0) - x.mean(0)).norm()) < 1e-2
    cov_single = torch.cov(single.tokens.T, correction=0)
    assert float((cov_single - cov_real).norm()) < 0.01 * float(cov_real.norm())
    with pytest.raises(ValueError, match="one-component"):
        distill_features(x, DistillOptions(mode="single", iters=1), gmm=fit_gmm(x, 4))


def _near_rare(bag: SlideBag, centre: torch.Tensor, radius: float) -> float:
    return float(((bag.features - centre).norm(dim=1) < radius).float().mean())


def test_gmm_distillation_keeps_the_rare_component_single_gaussian_loses_it() -> None:
    ds = synthetic_bags(1, 4, dim=32, patches=(400, 500), rare_fraction=0.05, seed=1)
    pos = next(b for b in ds if b.label == 1)
    neg = next(b for b in ds if b.label == 0)
    centre = ds.meta["rare_centre"][pos.domain]
    rare = ds.meta["rare_masks"][pos.slide_id]
    radius = 1.25 * float((pos.features[rare] - centre).norm(dim=1).max())
    frac: dict[tuple[str, int], float] = {}
    for mode in ("gmm", "single", "mean"):
        opts = DistillOptions(tokens=400, iters=60, mode=mode)
        for bag in (pos, neg):
            syn = distill_slide(bag, opts)
            frac[mode, bag.label] = _near_rare(syn, centre, radius)
    real = float(rare.float().mean())
    # M = 16: about the real share of rare tokens in the positive slide, none
    # in the negative one; one Gaussian or a mean: no rare cluster at all
    assert 0.5 * real <= frac["gmm", 1] <= 2 * real
    assert frac["gmm", 0] == 0.0
    for mode in ("single", "mean"):
        assert frac[mode, 1] < 0.25 * real and frac[mode, 0] < 0.25 * real


def test_distill_slide_metadata_seed_and_options() -> None:
    x = blobs(n=300, d=4).float()
    bag = SlideBag("s7", x, 1, "hospital_2")
    opts = DistillOptions(components=4, tokens=50, iters=20)
    a = distill_slide(bag, opts, seed=3)
    b = distill_slide(bag, opts, seed=3)
    c = distill_slide(bag, opts, seed=4)
    assert (a.slide_id, a.label, a.domain, a.coords) == (
        "s7-syn",
        1,
        "hospital_2",
        None,
    )
    assert a.features.shape == (50, 4) and torch.equal(a.features, b.features)
    assert not torch.equal(a.features, c.features)
    res = distill_features(
        x,
        DistillOptions(
            components=4, tokens=80, iters=60, reassign_every=10, init="random"
        ),
    )
    assert res.losses[-1] < 0.2 * res.losses[0]
    res = distill_features(
        x, DistillOptions(components=4, covariance="diag", tokens=80, iters=60)
    )
    assert res.target.covariance == "diag" and res.losses[-1] < res.losses[0]


def test_one_to_one_and_many_to_one() -> None:
    ds = synthetic_bags(1, 4, dim=8, patches=(60, 80), seed=0)
    opts = DistillOptions(components=4, tokens=30, iters=10)
    syn = distill_slides(ds.bags, opts, seed=5)
    assert [s.slide_id for s in syn] == [f"{b.slide_id}-syn" for b in ds]
    assert [s.label for s in syn] == [b.label for b in ds]
    # slides are optimised in one batch; each equals its own run (seed + i)
    for i, b in enumerate(ds):
        alone = distill_slide(b, opts, seed=5 + i)
        assert torch.allclose(alone.features, syn[i].features, atol=1e-5)
    pooled = compress_slides(ds.bags, 2, opts)
    assert sorted(s.label for s in pooled) == [0, 0, 1, 1]
    assert pooled[0].slide_id == "hospital_0-class0-syn0"
    assert all(s.features.shape == (30, 8) for s in pooled)


def test_options_are_validated_and_compress_uses_them() -> None:
    for bad in ({"tokens": 0}, {"iters": -1}, {"lr": 0.0}, {"mode": "median"}):
        with pytest.raises(ValueError, match="tokens >= 1|mode must be"):
            DistillOptions(**bad)
    ds = synthetic_bags(1, 4, dim=8, patches=(60, 80), seed=0)
    fixed = DistillOptions(components=4, tokens=30, iters=10)
    noise = DistillOptions(components=4, tokens=30, iters=10, init="random")
    a, b = compress_slides(ds.bags, 1, fixed), compress_slides(ds.bags, 1, noise)
    assert [s.slide_id for s in a] == [s.slide_id for s in b]
    # the options reach the many-to-one optimisation too
    assert not all(
        torch.equal(x.features, y.features) for x, y in zip(a, b, strict=True)
    )
