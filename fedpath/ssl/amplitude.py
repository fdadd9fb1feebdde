"""Fourier amplitude exchange and mixing (FedDG-ELCFS, Liu et al. CVPR 2021, Sec. 3.2).

An image's amplitude spectrum carries its low-level "style" (stain, scanner), its
phase the semantics. ELCFS clients share amplitude spectra and interpolate, in the
low-frequency band, their own amplitude with one from another client:
``A_mix = (1 - l) A_local + l A_other`` with ``l ~ U(0, 1)``, then invert with
the local phase. Only the band that is interpolated is shared here: a centred
square of side ``2 * half + 1`` of the (fftshift-ed) spectrum, with
``half = max(1, floor(beta * min(H, W) / 2))``.
"""

from __future__ import annotations

import torch


def band_half_width(height: int, width: int, beta: float) -> int:
    return max(1, int(beta * min(height, width) / 2))


def _band_slices(height: int, width: int, beta: float) -> tuple[slice, slice]:
    half = band_half_width(height, width, beta)
    ch, cw = height // 2, width // 2  # zero frequency after fftshift
    return slice(ch - half, ch + half + 1), slice(cw - half, cw + half + 1)


def _spectrum(x: torch.Tensor) -> torch.Tensor:
    return torch.fft.fftshift(torch.fft.fft2(x.float()), dim=(-2, -1))


def low_band_amplitude(x: torch.Tensor, beta: float) -> torch.Tensor:
    """``(B, 3, s, s)`` low-frequency amplitudes of images in [0, 1]."""
    rows, cols = _band_slices(x.shape[-2], x.shape[-1], beta)
    return _spectrum(x).abs()[..., rows, cols].contiguous()


def amplitude_mix(
    x: torch.Tensor, bank: torch.Tensor, generator: torch.Generator, beta: float
) -> torch.Tensor:
    """Interpolate each image's low band with a random bank entry (ELCFS Eq. 1).

    Parameters
    ----------
    x : Tensor
        ``(B, 3, H, W)`` images in [0, 1].
    bank : Tensor
        ``(M, 3, s, s)`` low-band amplitudes from other clients (``M >= 1``).
    generator : torch.Generator
        Draws the bank entry and ``l ~ U(0, 1)`` of every image.
    beta : float
        Band size (see the module docstring); must give the bank's ``s``.
    """
    b, _, h, w = x.shape
    rows, cols = _band_slices(h, w, beta)
    side = rows.stop - rows.start
    if bank.ndim != 4 or tuple(bank.shape[1:]) != (x.shape[1], side, side):
        raise ValueError(
            f"amplitude bank has shape {tuple(bank.shape)}, expected "
            f"(M, {x.shape[1]}, {side}, {side}) for {h}x{w} images and beta={beta}"
        )
    if bank.shape[0] < 1:
        raise ValueError("amplitude bank is empty")
    f = _spectrum(x)
    amp, pha = f.abs(), f.angle()
    idx = torch.randint(bank.shape[0], (b,), generator=generator)
    lam = torch.rand(b, generator=generator).view(b, 1, 1, 1).to(x.device)
    other = bank[idx].to(x.device, amp.dtype)
    amp[..., rows, cols] = (1 - lam) * amp[..., rows, cols] + lam * other
    mixed = torch.fft.ifft2(torch.fft.ifftshift(torch.polar(amp, pha), dim=(-2, -1)))
    return mixed.real.clamp(0.0, 1.0).to(x.dtype)
