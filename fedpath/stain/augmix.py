"""Level-2 AugMix restricted to geometry (FedStain Sec. III-D1; Hendrycks et al. 2020).

FedStain uses AugMix for *morphology* perturbations ("flipping, rotation, scaling,
and composition") and leaves colour to RandStain/MixStyle, so the op set here is
geometric only: horizontal flip, vertical flip, rotation, isotropic scaling, shear
and translation -- no colour, contrast or posterize ops (torchvision's AugMix,
used by FedCCRL, mixes both kinds and shares op choices across the batch).

Per sample and per chain, ``depth ~ U{depth[0]..depth[1]}`` ops are drawn, each
with its own magnitude. The ops are composed into one affine matrix per chain and
the image is resampled once (bilinear, reflection padding, so no black corners and
no blur accumulated over chain steps). The ``width`` chains are mixed with
``w ~ Dirichlet(alpha)`` and the result with the original by ``m ~ Beta(alpha,
alpha)``: ``out = m * x + (1 - m) * sum_k w_k chain_k`` (Hendrycks et al., Alg. 1).

Magnitudes follow torchvision's AugMix scale: ``severity`` in 1..10 caps the
level at ``severity / 10``, and at level 1 an op reaches 30 degrees of rotation,
a scale factor of 1.5 (or 1/1.5), a shear of 0.3 and a translation of 45 % of the
side. Each level is uniform in ``[0, severity / 10]`` with a random sign. The
random ops are symmetric (an op and its inverse are equally likely), so the
matrices are drawn directly as output-to-input sampling maps.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from fedpath.stain._random import (
    check_generator,
    rand,
    randint,
    sample_beta,
    sample_dirichlet,
)

__all__ = ["AUGMIX_OPS", "augmix", "random_affine_matrices"]

AUGMIX_OPS: tuple[str, ...] = (
    "hflip",
    "vflip",
    "rotate",
    "scale",
    "shear",
    "translate",
)
_MAX_ROTATE_DEG = 30.0
_MAX_LOG_SCALE = math.log(1.5)
_MAX_SHEAR = 0.3
_MAX_TRANSLATE = 0.45  # fraction of the image side


def _depth_range(depth: int | tuple[int, int]) -> tuple[int, int]:
    lo, hi = (depth, depth) if isinstance(depth, int) else depth
    if not (1 <= lo <= hi):
        raise ValueError(
            f"depth must be an int >= 1 or a (lo, hi) with 1 <= lo <= hi, got {depth}"
        )
    return int(lo), int(hi)


def random_affine_matrices(
    n: int,
    generator: torch.Generator,
    height: int,
    width: int,
    depth: int | tuple[int, int] = (1, 3),
    severity: int = 3,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """``n`` random geometric op chains as ``(n, 2, 3)`` ``affine_grid`` thetas.

    The ops act in pixel-proportional coordinates centred on the image (so a
    rotation of a non-square image is a true rotation) and are converted to
    ``affine_grid``'s normalized coordinates. Drawn on ``generator.device``.
    """
    lo, hi = _depth_range(depth)
    if not 1 <= severity <= 10:
        raise ValueError(f"severity must be in 1..10, got {severity}")
    dev = generator.device
    n_depth = lo + randint(hi - lo + 1, (n,), generator)
    eye = torch.eye(3, dtype=dtype, device=dev).expand(n, 3, 3)
    acc = eye.clone()
    for step in range(hi):
        op = randint(len(AUGMIX_OPS), (n,), generator)
        level = rand((n,), generator, dtype=dtype) * (severity / 10.0)
        sign = torch.where(rand((n,), generator) < 0.5, -1.0, 1.0).to(dtype)
        # Shear axis (x or y) and translation direction.
        extra = rand((n, 2), generator, dtype=dtype)
        signed = sign * level
        angle = torch.deg2rad(signed * _MAX_ROTATE_DEG)
        scale = torch.exp(signed * _MAX_LOG_SCALE)
        shear = signed * _MAX_SHEAR
        shear_x = extra[:, 0] < 0.5
        tx = (2.0 * extra[:, 0] - 1.0) * level * _MAX_TRANSLATE * width
        ty = (2.0 * extra[:, 1] - 1.0) * level * _MAX_TRANSLATE * height
        one, zero = torch.ones_like(level), torch.zeros_like(level)
        cos, sin = torch.cos(angle), torch.sin(angle)
        # Each candidate as (a, b, c, d, e, f) of [[a, b, c], [d, e, f]].
        cand = torch.stack(
            (
                torch.stack((-one, zero, zero, zero, one, zero), dim=1),  # hflip
                torch.stack((one, zero, zero, zero, -one, zero), dim=1),  # vflip
                torch.stack((cos, -sin, zero, sin, cos, zero), dim=1),  # rotate
                torch.stack((scale, zero, zero, zero, scale, zero), dim=1),  # scale
                torch.stack(
                    (
                        one,
                        torch.where(shear_x, shear, zero),
                        zero,
                        torch.where(shear_x, zero, shear),
                        one,
                        zero,
                    ),
                    dim=1,
                ),  # shear (x or y)
                torch.stack((one, zero, tx, zero, one, ty), dim=1),  # translate
            ),
            dim=1,
        )  # (n, n_ops, 6)
        chosen = cand[torch.arange(n, device=dev), op]  # (n, 6)
        m = eye.clone()
        m[:, :2, :] = chosen.view(n, 2, 3)
        active = (step < n_depth).view(n, 1, 1)
        acc = torch.where(active, m @ acc, acc)
    # Pixel-centred coordinates -> affine_grid's [-1, 1]: theta = P^-1 A P.
    half = torch.tensor([width / 2.0, height / 2.0, 1.0], dtype=dtype, device=dev)
    # (P^-1 A P)_ij = A_ij * h_j / h_i with P = diag(h) (h_2 = 1 for translations).
    theta = acc * (half.view(1, 1, 3) / half.view(1, 3, 1))
    return theta[:, :2, :]


def augmix(
    x: Tensor,
    generator: torch.Generator,
    width: int = 3,
    depth: int | tuple[int, int] = (1, 3),
    severity: int = 3,
    alpha: float = 1.0,
) -> Tensor:
    """Geometric AugMix (Hendrycks et al., ICLR 2020), vectorized over the batch.

    Parameters
    ----------
    x : Tensor
        ``(B, C, H, W)`` floating images (any channels; values are only resampled
        and convexly mixed, so ``[0, 1]`` inputs stay in ``[0, 1]``).
    generator : torch.Generator
        Randomness. Draw order: the chains' ops (:func:`random_affine_matrices` for
        ``width * B`` chains), the ``(B, width)`` Dirichlet weights, the ``B`` Beta
        mixing weights.
    width : int
        Number of chains (AugMix default 3).
    depth : int or (int, int)
        Ops per chain, fixed or uniform on ``{lo, ..., hi}`` (default 1..3).
    severity : int
        Magnitude cap in 1..10 (module docstring).
    alpha : float
        Dirichlet and Beta concentration.

    Returns
    -------
    Tensor
        Same shape and dtype as ``x``.
    """
    check_generator(generator)
    if x.ndim != 4 or not x.is_floating_point():
        raise ValueError(
            f"x must be a floating (B, C, H, W) tensor, got {tuple(x.shape)}"
        )
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be an int >= 1, got {width!r}")
    b, c, h, w = x.shape
    theta = random_affine_matrices(width * b, generator, h, w, depth, severity)
    ws = sample_dirichlet(alpha, width, b, generator, x.device, x.dtype)  # (B, width)
    m = sample_beta(alpha, alpha, (b,), generator, x.device, x.dtype).view(b, 1, 1, 1)
    if b == 0:
        return x.clone()
    theta = theta.to(device=x.device, dtype=x.dtype)
    # Chains are laid out chain-major: rows k*B .. (k+1)*B - 1 belong to chain k.
    src = x.repeat(width, 1, 1, 1)
    grid = F.affine_grid(theta, [width * b, c, h, w], align_corners=False)
    chains = F.grid_sample(
        src, grid, mode="bilinear", padding_mode="reflection", align_corners=False
    ).view(width, b, c, h, w)
    mixed = torch.einsum("bk,kbchw->bchw", ws, chains)
    return m * x + (1.0 - m) * mixed
