"""STRAP-approx (fedpath.algorithms.strap): random non-medical LAB styles, Reinhard
transfer and the client's stylized cross-entropy, replayed from its generator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.algorithms.strap import (
    StrapClient,
    rand_conv,
    random_styles,
    reinhard,
)
from fedpath.config import load_config
from fedpath.stain import to_space
from fedpath.types import ClientState, Payload
from tests.algorithms.halves import halves
from tests.conftest import tiny_overrides


def strap_client(tmp_path: Path, *params: str) -> StrapClient:
    over = ["algorithm.name=strap", *(f"algorithm.params.{p}" for p in params)]
    client = halves(load_config(None, tiny_overrides(tmp_path, *over))).client()
    assert isinstance(client, StrapClient)
    client.begin(client.ctx.build_model(), Payload(), ClientState())
    return client


def images(n: int = 6) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    return torch.rand((n, 3, 16, 16), generator=gen) * 0.5 + 0.25


def test_styles_are_drawn_in_the_documented_non_medical_ranges() -> None:
    styles = random_styles(500, torch.Generator().manual_seed(0))
    assert styles.shape == (500, 3, 2)
    lo = torch.tensor([[20.0, 8.0], [-45.0, 4.0], [-45.0, 4.0]])
    hi = torch.tensor([[85.0, 30.0], [45.0, 30.0], [45.0, 30.0]])
    assert bool((styles >= lo).all()) and bool((styles <= hi).all())
    # spread over the range, not a point: uniform draws cover most of it
    span = (styles.amax(0) - styles.amin(0)) / (hi - lo)
    assert float(span.min()) > 0.9
    again = random_styles(500, torch.Generator().manual_seed(0))
    assert torch.equal(styles, again)


def test_reinhard_to_an_images_own_style_gives_the_image_back() -> None:
    x = images()
    lab = to_space(x, "lab")
    own = torch.stack([lab.mean((2, 3)), lab.std((2, 3))], dim=-1)  # (n, 3, 2)
    torch.testing.assert_close(reinhard(x, own), x, atol=2e-3, rtol=0)
    # a style with a brighter L mean gives a brighter image, layout kept
    bright = own.clone()
    bright[:, 0, 0] += 10.0
    out = reinhard(x, bright)
    assert bool((out.mean((1, 2, 3)) > x.mean((1, 2, 3))).all())


def test_rand_conv_full_keeps_range_and_is_seeded() -> None:
    x = images()
    a = rand_conv(x, torch.Generator().manual_seed(4), "full")
    b = rand_conv(x, torch.Generator().manual_seed(4), "full")
    assert torch.equal(a, b) and a.shape == x.shape
    assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0
    assert not torch.allclose(a, x)


def test_p_zero_leaves_every_image_and_p_one_restyles_every_image(
    tmp_path: Path,
) -> None:
    x = images()
    kept = strap_client(tmp_path / "a", "p=0.0").stylize(x)
    assert torch.equal(kept, x)
    client = strap_client(tmp_path / "b", "p=1.0", "texture=false")
    out = client.stylize(x)
    # replay the client's generator: colour transfer only (texture off)
    gen = torch.Generator().manual_seed(client.ctx.seed_for("strap"))
    torch.testing.assert_close(out, reinhard(x, random_styles(len(x), gen)))
    assert bool((out - x).abs().flatten(1).amax(1).gt(1e-3).all())


def test_loss_is_cross_entropy_on_the_stylized_batch(tmp_path: Path) -> None:
    client = strap_client(tmp_path)
    data = client.ctx.data
    x = data.load(np.arange(8)).float() / 255
    y = torch.from_numpy(data.labels[:8]).long()
    model = client.ctx.build_model().eval()
    got = client.loss(model, x, y)["loss"].detach()
    client.begin(model, Payload(), ClientState())  # the same draws again
    with torch.no_grad():
        xs = client.stylize(x)
        expected = torch.nn.functional.cross_entropy(model(xs), y)
        plain = torch.nn.functional.cross_entropy(model(x), y)
    assert float(got) == pytest.approx(float(expected), rel=1e-6)
    assert float(got) != pytest.approx(float(plain), rel=1e-6)


def test_strap_stylizes_colour_not_layout() -> None:
    from fedpath.algorithms.strap import rand_conv, random_styles, reinhard
    from fedpath.stain import to_space

    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 3, 32, 32) * 0.5 + 0.25
    styles = random_styles(6, g)
    y = reinhard(x, styles)
    lab = to_space(y, "lab")
    # the LAB mean moves to the drawn style (up to clamping at the gamut)
    err = (lab.mean((2, 3)) - styles[..., 0]).abs()
    assert float(err[:, 0].median()) < 8.0
    # layout kept: the L channel is still strongly correlated with the input's
    lx = to_space(x, "lab")[:, 0].flatten(1)
    ly = lab[:, 0].flatten(1)
    corr = torch.nn.functional.cosine_similarity(
        lx - lx.mean(1, keepdim=True), ly - ly.mean(1, keepdim=True)
    )
    assert float(corr.min()) > 0.5
    t = rand_conv(x, g, "full")
    assert t.shape == x.shape and bool(torch.isfinite(t).all())
    torch.testing.assert_close(t.mean((2, 3)), x.mean((2, 3)), atol=0.05, rtol=0)
