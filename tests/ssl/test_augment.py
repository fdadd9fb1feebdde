"""SimCLR augmentation: shape, range, dtype, determinism, the individual ops."""

from __future__ import annotations

import pytest
import torch

from fedpath.ssl.augment import (
    _RGB2YIQ,
    _YIQ2RGB,
    SimCLRAugment,
    _hue_rotate,
    blur_kernel_size,
    gaussian_blur,
    simclr_augment,
)


def images(b: int = 12, size: int = 20, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, 3, size, size), generator=g, dtype=torch.uint8)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_uint8_in_uint8_out_same_shape() -> None:
    x = images()
    y = simclr_augment(x, gen(0))
    assert y.dtype == torch.uint8 and y.shape == x.shape
    assert not torch.equal(x, y)


def test_float_in_unit_range_out() -> None:
    x = images().float() / 255
    y = simclr_augment(x, gen(0))
    assert y.dtype == torch.float32 and y.shape == x.shape
    assert float(y.min()) >= 0.0 and float(y.max()) <= 1.0


def test_same_seed_same_views_other_seed_differs() -> None:
    x = images()
    a = simclr_augment(x, gen(3))
    assert torch.equal(a, simclr_augment(x, gen(3)))
    assert not torch.equal(a, simclr_augment(x, gen(4)))
    g = gen(3)
    first, second = simclr_augment(x, g), simclr_augment(x, g)
    assert not torch.equal(first, second)  # two views of one batch differ


def test_grayscale_always_gives_equal_channels() -> None:
    aug = SimCLRAugment(gray_p=1.0, jitter_p=0.0, blur_p=0.0)
    y = aug(images().float() / 255, gen(0))
    assert torch.allclose(y[:, 0], y[:, 1], atol=1e-6)
    assert torch.allclose(y[:, 1], y[:, 2], atol=1e-6)


def test_yiq_round_trip_and_zero_hue_is_identity() -> None:
    assert torch.allclose(_YIQ2RGB @ _RGB2YIQ, torch.eye(3), atol=1e-5)
    x = torch.rand(4, 3, 8, 8)
    assert torch.allclose(_hue_rotate(x, torch.zeros(4, 1, 1, 1)), x, atol=1e-5)


def test_blur_preserves_constant_images_and_smooths_noise() -> None:
    flat = torch.full((2, 3, 16, 16), 0.3)
    sigma = torch.tensor([0.5, 2.0])
    assert torch.allclose(gaussian_blur(flat, sigma, 5), flat, atol=1e-6)
    noise = torch.rand(2, 3, 16, 16, generator=gen(0))
    assert gaussian_blur(noise, sigma, 5).var() < noise.var()
    assert blur_kernel_size(224) == 23  # SimCLR/FedAD: 23 px at 224 px
    assert blur_kernel_size(16) == 3


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        simclr_augment(torch.zeros(3, 8, 8), gen(0))
    with pytest.raises(ValueError, match="hue"):
        SimCLRAugment(hue=0.7)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"flip_p": 1.5}, r"'flip_p': expected a number in \[0, 1\], got 1.5"),
        ({"jitter_p": -0.1}, r"'jitter_p': expected a number in \[0, 1\]"),
        ({"gray_p": float("nan")}, r"'gray_p': expected a number in \[0, 1\]"),
        ({"blur_p": 2}, r"'blur_p': expected a number in \[0, 1\], got 2"),
        ({"brightness": 1.2}, r"'brightness': expected a number in \[0, 1\]"),
        ({"contrast": -0.4}, r"'contrast': expected a number in \[0, 1\]"),
        ({"saturation": 1.01}, r"'saturation': expected a number in \[0, 1\]"),
        ({"hue": 0.7}, r"'hue': expected a number in \[0, 0.5\], got 0.7"),
        (
            {"crop_min_scale": 0.0},
            r"'crop_min_scale': expected a number in \[1e-06, 1\]",
        ),
        ({"blur_sigma": (2.0, 1.0)}, r"'blur_sigma': expected \(lo, hi\) with 0 < lo"),
        ({"blur_sigma": (0.0, 1.0)}, r"'blur_sigma': expected \(lo, hi\)"),
    ],
)
def test_parameters_are_checked(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimCLRAugment(**kwargs)  # type: ignore[arg-type]


def test_boundary_parameters_are_valid() -> None:
    edge = SimCLRAugment(
        crop_min_scale=1.0,
        flip_p=0.0,
        jitter_p=1.0,
        brightness=0.0,
        contrast=1.0,
        hue=0.5,
        gray_p=0.0,
        blur_p=1.0,
        blur_sigma=(1.0, 1.0),
    )
    out = edge(torch.rand(2, 3, 8, 8, generator=gen(0)), gen(1))
    assert out.shape == (2, 3, 8, 8)


def test_fedad_default_jitter_rotates_hue_up_to_the_papers_0_4() -> None:
    """Issue 39: FedAD Sec. 5.2 jitters hue with strength 0.4 (up to 0.4 of a
    turn), not SimCLR's s = 0.5 value 0.1 (``hue: 0.1`` is the option)."""
    from dataclasses import replace

    from fedpath.params.algorithms import FedADParams
    from fedpath.ssl.augment import color_jitter

    aug = FedADParams().augmentation()
    assert (aug.brightness, aug.contrast, aug.saturation) == (0.4, 0.4, 0.4)
    # hue only, on a low-chroma colour that every rotation keeps inside [0, 1]
    hue_only = replace(aug, brightness=0.0, contrast=0.0, saturation=0.0)
    x = torch.tensor([0.55, 0.45, 0.5]).view(1, 3, 1, 1).repeat(400, 1, 4, 4)
    out = color_jitter(x, gen(0), hue_only)
    iq_in = torch.einsum("ij,bjhw->bihw", _RGB2YIQ, x)[:, 1:, 0, 0]
    iq_out = torch.einsum("ij,bjhw->bihw", _RGB2YIQ, out)[:, 1:, 0, 0]
    turn = torch.atan2(iq_out[:, 1], iq_out[:, 0]) - torch.atan2(
        iq_in[:, 1], iq_in[:, 0]
    )
    turn = torch.remainder(turn / (2 * torch.pi) + 0.5, 1.0) - 0.5
    assert turn.abs().max() <= 0.4 + 1e-4
    assert turn.abs().max() > 0.3  # beyond anything hue = 0.1 can draw
