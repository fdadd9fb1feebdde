"""Pseudo bag styles (HistoFS): patch styles, W2 k-means, AdaIN, authenticity and
the mapping of styles between embedding spaces."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedpath.mil.styles import (
    adain,
    authenticity,
    map_styles,
    patch_styles,
    pseudo_bag_styles,
    style_moments,
    w2_kmeans,
)


def test_patch_styles_and_w2_kmeans() -> None:
    x = torch.tensor([[1.0, 3.0], [0.0, 0.0], [2.0, 2.0]])
    assert torch.allclose(
        patch_styles(x), torch.tensor([[2.0, 1.0], [0.0, 0.0], [2.0, 0.0]])
    )
    # two well separated groups of (mu, sigma): the centres are the group means
    styles = torch.tensor(
        [[0.0, 1.0], [0.2, 1.2], [0.1, 0.8], [5.0, 3.0], [5.4, 3.2]], dtype=torch.float
    )
    centres, assign = w2_kmeans(styles, 2, seed=3)
    got = centres[centres[:, 0].argsort()]
    assert torch.allclose(got, torch.tensor([[0.1, 1.0], [5.2, 3.1]]), atol=1e-5)
    # each point sits with the centre nearest in W2 = sqrt(dmu^2 + dsigma^2)
    for s, a in zip(styles, assign, strict=True):
        w2 = [math.sqrt((s[0] - c[0]) ** 2 + (s[1] - c[1]) ** 2) for c in centres]
        assert int(a) == int(np.argmin(w2))
    few = pseudo_bag_styles(torch.randn(3, 8), 5, 10, 0)
    assert few.shape == (3, 2)  # fewer patches than K


def test_adain_and_authenticity() -> None:
    h = torch.tensor([[1.0, 2.0, 3.0, 6.0], [-1.0, 0.0, 0.0, 1.0]])
    style = torch.tensor([10.0, 0.5])
    out = adain(h, style)
    mu = h.mean(1, keepdim=True)
    sd = h.std(1, unbiased=False, keepdim=True)
    assert torch.allclose(out, (h - mu) / (sd + 1e-5) * 0.5 + 10.0)
    assert torch.allclose(out.mean(1), torch.full((2,), 10.0))
    assert torch.allclose(
        out.std(1, unbiased=False), 0.5 * sd[:, 0] / (sd[:, 0] + 1e-5)
    )
    own = adain(h[:1], patch_styles(h[:1])[0])
    assert torch.allclose(own, h[:1], atol=1e-4)  # own style: identity
    a = torch.tensor([[0.5, 0.5, 0.0]])
    assert math.isclose(float(authenticity(a, a, 0.4)), 0.6, rel_tol=1e-6)
    b = torch.tensor([[0.0, 0.0, 1.0]])
    assert math.isclose(float(authenticity(a, b, 0.4)), 1.0, rel_tol=1e-6)
    c = torch.tensor([[1.0, 0.0, 0.0]])
    want = 1 - 0.4 * 0.5 / math.sqrt(0.5)
    assert math.isclose(float(authenticity(a, c, 0.4)), want, rel_tol=1e-6)


def test_style_mapping_matches_the_receivers_moments() -> None:
    gen = torch.Generator().manual_seed(0)
    foreign = torch.stack(
        [torch.randn(50, generator=gen) * 4 + 20, torch.rand(50, generator=gen) + 3],
        dim=1,
    )
    mu, sigma = torch.randn(40, generator=gen), torch.rand(40, generator=gen)
    own = torch.stack([mu * 0.1, sigma * 0.2 + 0.5], dim=1)
    src, dst = style_moments(foreign), style_moments(own)
    assert torch.allclose(src[0], foreign.mean(0)) and torch.allclose(
        src[1], foreign.std(0, unbiased=False)
    )
    mapped = map_styles(foreign, src, dst)
    assert torch.allclose(style_moments(mapped), dst, atol=1e-5)
    # z-scores kept: the order of styles along each coordinate is unchanged
    assert torch.equal(mapped[:, 0].argsort(), foreign[:, 0].argsort())
    assert torch.allclose(map_styles(own, dst, dst), own, atol=1e-6)
    # a sigma that would go negative is clamped to stay a scale
    wide = torch.tensor([[0.0, 1e-5], [0.0, 1.0]])
    out = map_styles(torch.tensor([[0.0, -50.0]]), style_moments(wide), dst)
    assert float(out[0, 1]) == pytest.approx(1e-5)
