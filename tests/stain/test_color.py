"""Colour spaces of fedpath.stain.color: round trips, reference values, clamping."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedpath.data.synthetic_render import make_hospital_profiles, render_patches
from fedpath.stain.color import COLOR_SPACES, from_space, to_space

# scikit-image's rgb_from_hed (rows: haematoxylin, eosin, DAB optical densities).
HED_FROM_OD = np.linalg.inv(
    np.array([[0.65, 0.70, 0.29], [0.07, 0.99, 0.11], [0.27, 0.57, 0.78]])
)


def random_images(dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(4, 3, 16, 16, generator=g, dtype=dtype)


def he_images() -> torch.Tensor:
    """Real-ish H&E patches from the synthetic renderer (two hospitals)."""
    profiles = make_hospital_profiles(2, seed=0)
    arr = np.concatenate(
        [render_patches(np.array([0, 1]), p, image_size=32, seed=1) for p in profiles]
    )
    return torch.from_numpy(arr).float() / 255.0


@pytest.mark.parametrize("space", ["lab", "hed"])
def test_round_trip_float64_is_exact(space: str) -> None:
    # Values >= 1e-6 avoid the HED optical-density floor, which is the only loss.
    x = random_images(torch.float64).clamp_min(1e-6)
    back = from_space(to_space(x, space), space)  # type: ignore[arg-type]
    torch.testing.assert_close(back, x, atol=1e-10, rtol=0)


@pytest.mark.parametrize("space", ["lab", "hed"])
def test_round_trip_float32_random_and_he(space: str) -> None:
    for x in (random_images(), he_images()):
        back = from_space(to_space(x, space), space)  # type: ignore[arg-type]
        # float32 rounding through pow/cbrt (LAB) stays far below 1/255; in HED
        # exact zeros come back as the 1e-6 optical-density floor.
        torch.testing.assert_close(back, x, atol=1e-5, rtol=0)


def test_rgb_is_identity_and_from_space_clamps() -> None:
    x = random_images()
    assert to_space(x, "rgb") is x
    y = torch.full_like(x, 3.0)
    y[:, 0] = -2.0
    out = from_space(y, "rgb")
    assert out.min() == 0 and out.max() == 1


def test_lab_reference_values() -> None:
    colours = torch.tensor(
        [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.5, 0.5, 0.5]]
    ).view(4, 3, 1, 1)
    lab = to_space(colours, "lab")[:, :, 0, 0]
    torch.testing.assert_close(
        lab[0], torch.tensor([100.0, 0.0, 0.0]), atol=1e-4, rtol=0
    )
    torch.testing.assert_close(lab[1], torch.zeros(3), atol=1e-4, rtol=0)
    # sRGB red, D65 (standard tabulated value).
    torch.testing.assert_close(
        lab[2], torch.tensor([53.24, 80.09, 67.20]), atol=0.05, rtol=0
    )
    # Neutral grey has zero chroma and L* = 53.39 (sRGB 0.5 -> Y = 0.2140).
    torch.testing.assert_close(lab[3, 1:], torch.zeros(2), atol=1e-4, rtol=0)
    assert abs(float(lab[3, 0]) - 53.39) < 0.01


def test_hed_matches_numpy_formula() -> None:
    x = he_images()
    x[0, :, :2, :2] = 0.0  # exercise the 1e-6 floor
    rgb = x.permute(0, 2, 3, 1).double().numpy()
    od = np.log(np.maximum(rgb, 1e-6)) / np.log(1e-6)
    expected = (od @ HED_FROM_OD).transpose(0, 3, 1, 2)
    got = to_space(x, "hed").double().numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # Haematoxylin-rich (purple) pixels have a positive H concentration.
    purple = torch.tensor([0.35, 0.2, 0.55]).view(1, 3, 1, 1)
    assert float(to_space(purple, "hed")[0, 0]) > 0.05


@pytest.mark.parametrize("space", ["lab", "hed"])
def test_from_space_out_of_gamut_is_finite_and_clamped(space: str) -> None:
    g = torch.Generator().manual_seed(3)
    y = torch.randn(2, 3, 8, 8, generator=g) * 1e4
    out = from_space(y, space)  # type: ignore[arg-type]
    assert torch.isfinite(out).all()
    assert out.min() >= 0 and out.max() <= 1


def test_white_and_constant_images_are_finite() -> None:
    white = torch.ones(2, 3, 8, 8)
    for space in COLOR_SPACES:
        y = to_space(white, space)  # type: ignore[arg-type]
        assert torch.isfinite(y).all()
        torch.testing.assert_close(from_space(y, space), white, atol=1e-5, rtol=0)  # type: ignore[arg-type]


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="unknown colour space"):
        to_space(torch.rand(1, 3, 4, 4), "hsv")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        to_space(torch.rand(1, 4, 4, 4), "lab")
    with pytest.raises(TypeError, match="floating"):
        to_space(torch.zeros(1, 3, 4, 4, dtype=torch.uint8), "lab")
