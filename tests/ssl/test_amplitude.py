"""Fourier amplitude exchange of FedDG-ELCFS (fedpath.ssl.amplitude), checked
against numpy's FFT."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedpath.ssl.amplitude import amplitude_mix, band_half_width, low_band_amplitude


def images(seed: int, b: int = 2, size: int = 16) -> torch.Tensor:
    return torch.rand(b, 3, size, size, generator=torch.Generator().manual_seed(seed))


def test_band_half_width() -> None:
    assert band_half_width(16, 16, 0.25) == 2
    assert band_half_width(16, 32, 0.5) == 4  # the shorter side decides
    assert band_half_width(16, 16, 0.01) == 1  # never below one frequency


def test_low_band_is_the_centred_square_of_the_shifted_spectrum() -> None:
    x = images(0)
    band = low_band_amplitude(x, 0.25)
    assert tuple(band.shape) == (2, 3, 5, 5)
    spec = np.abs(np.fft.fftshift(np.fft.fft2(x.numpy()), axes=(-2, -1)))
    np.testing.assert_allclose(
        band.numpy(), spec[..., 6:11, 6:11], rtol=1e-4, atol=1e-4
    )
    # the centre is the zero frequency: the sum of every channel's pixels
    np.testing.assert_allclose(
        band[..., 2, 2].numpy(), x.sum((-2, -1)).numpy(), rtol=1e-5
    )


def test_mixing_with_ones_own_band_changes_nothing() -> None:
    x = images(1, b=1)
    own = low_band_amplitude(x, 0.25)
    out = amplitude_mix(x, own, torch.Generator().manual_seed(0), 0.25)
    torch.testing.assert_close(out, x, atol=1e-5, rtol=0)


def numpy_mix(x: np.ndarray, other_amp: np.ndarray, lam: float) -> np.ndarray:
    """ELCFS Eq. 1 with numpy: mix the 5 x 5 low band, keep the phase, clamp."""
    f = np.fft.fftshift(np.fft.fft2(x), axes=(-2, -1))
    amp, pha = np.abs(f), np.angle(f)
    amp[..., 6:11, 6:11] = (1 - lam) * amp[..., 6:11, 6:11] + lam * other_amp
    out = np.fft.ifft2(np.fft.ifftshift(amp * np.exp(1j * pha), axes=(-2, -1)))
    return np.clip(out.real, 0.0, 1.0)


def test_mixing_matches_a_numpy_computation() -> None:
    x, other = images(2, b=2), images(3, b=3) * 0.3
    bank = low_band_amplitude(other, 0.25)
    out = amplitude_mix(x, bank, torch.Generator().manual_seed(4), 0.25)
    g = torch.Generator().manual_seed(4)  # the draws: bank entries, then lambdas
    idx = torch.randint(3, (2,), generator=g)
    lam = torch.rand(2, generator=g)
    for i in range(2):
        ref = numpy_mix(
            x[i].double().numpy(), bank[idx[i]].double().numpy(), float(lam[i])
        )
        np.testing.assert_allclose(out[i].numpy(), ref, atol=1e-5)
    assert out.dtype == x.dtype and not torch.allclose(out, x, atol=1e-3)


def test_bank_shape_is_checked() -> None:
    x = images(0)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=r"expected \(M, 3, 5, 5\)"):
        amplitude_mix(x, torch.zeros(1, 3, 4, 4), g, 0.25)
    with pytest.raises(ValueError, match="amplitude bank is empty"):
        amplitude_mix(x, torch.zeros(0, 3, 5, 5), g, 0.25)
