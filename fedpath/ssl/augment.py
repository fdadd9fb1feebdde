"""Batched SimCLR augmentation T(.) for self-supervised federated training.

FedAD Section 5.2 (identical to SimCLR, Chen et al. 2020): random resized crop
(scale 0.08-1, aspect 3/4-4/3), horizontal flip (p 0.5), colour jitter of strength
0.4 on brightness, contrast, saturation and hue (p 0.8), grayscale (p 0.2), Gaussian
blur with sigma in [0.1, 2.0] (p 0.5). Every draw comes from one
``torch.Generator``, so two calls with equally seeded generators give identical
views, and all samples of a batch are transformed at once (no per-sample Python
loop): crop + flip is one ``grid_sample``, the jitter is per-sample arithmetic,
the blur is one grouped convolution.

Differences from torchvision's per-image pipeline, on purpose (CPU speed):

* the crop box is drawn once and clamped to the image instead of torchvision's
  ten rejection tries (same scale range; very elongated boxes are slightly less
  likely);
* hue is rotated in YIQ space (a linear map) instead of the HSV round trip; the
  jitter order is one random permutation per batch, not per image;
* the blur kernel is ~10 % of the image side (odd, >= 3) as in SimCLR (23 px at
  224 px), so on tiny images a large sigma is truncated by the kernel;
* hue strength defaults to the paper's 0.4 ("0.4 to brightness, contrast,
  saturation, and hue"); ``hue=0.1`` is SimCLR's own value at s = 0.5 (and
  MoCo v2's), fedpath's option (docs/fidelity/fedad.md).

Input is ``uint8`` (returned as ``uint8``) or floating point in [0, 1] (returned
as float in [0, 1]), shape ``(B, 3, H, W)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F

from fedpath.schema import Check, Checked, Probability, Range

_GRAY = (0.299, 0.587, 0.114)
_RGB2YIQ = torch.tensor(
    [[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]]
)
_YIQ2RGB = torch.linalg.inv(_RGB2YIQ)


#: a probability of applying one step of the pipeline
Chance = Annotated[float, Probability]
#: a colour-jitter strength: the factor is drawn from [1 - s, 1 + s]
Strength = Annotated[float, Range(0, 1)]


def _sigma_range(pair: tuple[float, float]) -> bool:
    return len(pair) == 2 and 0 < pair[0] <= pair[1] < math.inf


@dataclass(frozen=True)
class SimCLRAugment(Checked):
    """Parameters of T(.) (defaults: FedAD Section 5.2 / SimCLR)."""

    crop_min_scale: Annotated[float, Range(1e-6, 1)] = 0.08
    flip_p: Chance = 0.5
    jitter_p: Chance = 0.8
    brightness: Strength = 0.4
    contrast: Strength = 0.4
    saturation: Strength = 0.4
    hue: Annotated[float, Range(0, 0.5)] = 0.4  # a rotation of at most half a turn
    gray_p: Chance = 0.2
    blur_p: Chance = 0.5
    blur_sigma: Annotated[
        tuple[float, float], Check("(lo, hi) with 0 < lo <= hi", _sigma_range)
    ] = (0.1, 2.0)

    def __call__(
        self, images: torch.Tensor, generator: torch.Generator
    ) -> torch.Tensor:
        return simclr_augment(images, generator, self)


def _uniform(
    n: int, lo: float, hi: float, g: torch.Generator, device: torch.device
) -> torch.Tensor:
    return (lo + (hi - lo) * torch.rand(n, generator=g)).to(device)


def _mask(n: int, p: float, g: torch.Generator, device: torch.device) -> torch.Tensor:
    return (torch.rand(n, generator=g) < p).to(device).view(n, 1, 1, 1)


def gray(x: torch.Tensor) -> torch.Tensor:
    """ITU-R 601 luma, shape ``(B, 1, H, W)``."""
    w = x.new_tensor(_GRAY).view(1, 3, 1, 1)
    return (x * w).sum(dim=1, keepdim=True)


def resized_crop_flip(
    x: torch.Tensor, g: torch.Generator, min_scale: float, flip_p: float
) -> torch.Tensor:
    """Random resized crop (area in [min_scale, 1], aspect 3/4-4/3) + h-flip."""
    b, device = x.shape[0], x.device
    area = _uniform(b, min_scale, 1.0, g, device)
    log_r = _uniform(b, math.log(3 / 4), math.log(4 / 3), g, device)
    ratio = log_r.exp()
    w = (area * ratio).sqrt().clamp(max=1.0)  # fraction of the width
    h = (area / ratio).sqrt().clamp(max=1.0)
    cx = (1 - w) * (2 * _uniform(b, 0.0, 1.0, g, device) - 1)  # centre in [-1, 1]
    cy = (1 - h) * (2 * _uniform(b, 0.0, 1.0, g, device) - 1)
    flip = _mask(b, flip_p, g, device).view(b)
    sx = torch.where(flip, -w, w)
    theta = torch.zeros(b, 2, 3, device=device, dtype=x.dtype)
    theta[:, 0, 0], theta[:, 0, 2] = sx, cx
    theta[:, 1, 1], theta[:, 1, 2] = h, cy
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(
        x, grid, mode="bilinear", padding_mode="reflection", align_corners=False
    )


def color_jitter(
    x: torch.Tensor, g: torch.Generator, aug: SimCLRAugment
) -> torch.Tensor:
    """Brightness, contrast, saturation, hue in a random order (one per batch)."""
    b, device = x.shape[0], x.device
    factors = {
        "brightness": _uniform(b, 1 - aug.brightness, 1 + aug.brightness, g, device),
        "contrast": _uniform(b, 1 - aug.contrast, 1 + aug.contrast, g, device),
        "saturation": _uniform(b, 1 - aug.saturation, 1 + aug.saturation, g, device),
        "hue": _uniform(b, -aug.hue, aug.hue, g, device),
    }
    order = torch.randperm(4, generator=g).tolist()
    names = ["brightness", "contrast", "saturation", "hue"]
    for i in order:
        name = names[i]
        f = factors[name].view(b, 1, 1, 1).to(x.dtype)
        if name == "brightness":
            x = x * f
        elif name == "contrast":
            m = gray(x).mean(dim=(1, 2, 3), keepdim=True)
            x = (x - m) * f + m
        elif name == "saturation":
            y = gray(x)
            x = (x - y) * f + y
        else:
            x = _hue_rotate(x, f * (2 * math.pi))
        x = x.clamp(0.0, 1.0)
    return x


def _hue_rotate(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rotate the chroma plane (I, Q) of YIQ by ``angle`` radians per sample."""
    to_yiq = _RGB2YIQ.to(x)
    to_rgb = _YIQ2RGB.to(x)
    yiq = torch.einsum("ij,bjhw->bihw", to_yiq, x)
    cos, sin = angle.cos(), angle.sin()
    i, q = yiq[:, 1:2], yiq[:, 2:3]
    yiq = torch.cat([yiq[:, :1], cos * i - sin * q, sin * i + cos * q], dim=1)
    return torch.einsum("ij,bjhw->bihw", to_rgb, yiq)


def gaussian_blur(
    x: torch.Tensor, sigma: torch.Tensor, kernel_size: int
) -> torch.Tensor:
    """Per-sample separable Gaussian blur (one grouped convolution per axis)."""
    b, c, hgt, wid = x.shape
    half = kernel_size // 2
    t = torch.arange(-half, half + 1, device=x.device, dtype=x.dtype)
    k = torch.exp(-(t.view(1, -1) ** 2) / (2 * sigma.view(-1, 1).to(x.dtype) ** 2))
    k = (k / k.sum(dim=1, keepdim=True)).repeat_interleave(c, dim=0)  # (B*C, K)
    flat = x.reshape(1, b * c, hgt, wid)
    pad = min(half, hgt - 1, wid - 1)
    if pad < half:  # reflection padding cannot exceed the image; crop the kernel
        k = k[:, half - pad : half + pad + 1]
        k = k / k.sum(dim=1, keepdim=True)
    flat = F.pad(flat, (pad, pad, 0, 0), mode="reflect")
    flat = F.conv2d(flat, k.view(b * c, 1, 1, -1), groups=b * c)
    flat = F.pad(flat, (0, 0, pad, pad), mode="reflect")
    flat = F.conv2d(flat, k.view(b * c, 1, -1, 1), groups=b * c)
    return flat.view(b, c, hgt, wid)


def blur_kernel_size(image_size: int) -> int:
    """SimCLR's kernel: ~10 % of the image side, odd, at least 3."""
    k = max(3, round(0.1 * image_size))
    return k if k % 2 else k + 1


def simclr_augment(
    images: torch.Tensor, generator: torch.Generator, aug: SimCLRAugment | None = None
) -> torch.Tensor:
    """One SimCLR view of every image of a batch (see the module docstring).

    Parameters
    ----------
    images : Tensor
        ``(B, 3, H, W)``, ``uint8`` or floating point in [0, 1].
    generator : torch.Generator
        CPU generator; every random draw of this call comes from it.
    aug : SimCLRAugment, optional
        Parameters (default: FedAD Section 5.2).

    Returns
    -------
    Tensor
        Same shape and dtype as ``images`` (values in [0, 255] or [0, 1]).
    """
    aug = aug or SimCLRAugment()
    if images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(
            f"simclr_augment expects images of shape (B, 3, H, W), got "
            f"{tuple(images.shape)}"
        )
    is_uint8 = images.dtype == torch.uint8
    if not (is_uint8 or images.is_floating_point()):
        raise ValueError(f"images must be uint8 or float, got {images.dtype}")
    x = images.float().div(255.0) if is_uint8 else images
    b, device = x.shape[0], x.device
    if b == 0:
        return images.clone()
    x = resized_crop_flip(x, generator, aug.crop_min_scale, aug.flip_p)
    jit = _mask(b, aug.jitter_p, generator, device)
    x = torch.where(jit, color_jitter(x, generator, aug), x)
    gr = _mask(b, aug.gray_p, generator, device)
    x = torch.where(gr, gray(x).expand_as(x), x)
    bl = _mask(b, aug.blur_p, generator, device)
    sigma = _uniform(b, aug.blur_sigma[0], aug.blur_sigma[1], generator, device)
    size = blur_kernel_size(min(x.shape[2], x.shape[3]))
    x = torch.where(bl, gaussian_blur(x, sigma, size), x)
    x = x.clamp(0.0, 1.0)
    if is_uint8:
        return x.mul(255.0).round().to(torch.uint8)
    return x.to(images.dtype)
