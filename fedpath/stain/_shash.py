"""Fitting engine of :func:`fedpath.stain.shape.fit_sinh_arcsinh` (private).

Vectorized Levenberg-Marquardt on the two parameters ``(epsilon, log delta)`` of
the sinh-arcsinh map ``w = sinh(delta * u + epsilon)``, ``u = asinh(z)``, per
(sample, channel), minimising the weighted squared error between the empirical
skewness / excess kurtosis of ``w`` and a target. The Jacobian is analytic
(derivatives of the central moments of ``w``), so one iteration is one pass of
fused reductions over the pixels; see ``shape.py`` for the method's contract.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = [
    "ACCURATE_FIT",
    "DELTA_MAX",
    "DELTA_MIN",
    "EPSILON_MAX",
    "KURT_WEIGHT",
    "Fit",
    "ShapeFit",
    "asinh_monotone",
    "levenberg_marquardt",
]

EPSILON_MAX = 2.0
DELTA_MIN, DELTA_MAX = 0.2, 3.0
_LOG_DELTA_MIN, _LOG_DELTA_MAX = math.log(DELTA_MIN), math.log(DELTA_MAX)
_MAX_STEP = (0.5, 0.35)  # per-iteration trust region on (epsilon, log delta)
KURT_WEIGHT = 0.5  # kurtosis errors are ~2x skewness errors in size; balance them
_TOL = 1e-8  # weighted squared error below which a channel counts as converged


@dataclass(frozen=True)
class ShapeFit:
    """Budget of the sinh-arcsinh fit per (sample, channel).

    Taken by :func:`~fedpath.stain.shape.fit_sinh_arcsinh` and everything built on
    it (``match_shape``, ``restyle``, RandStain, MixStyle). The defaults
    (:data:`ACCURATE_FIT`) are the library's accurate fit (analysis, Table V
    restyling, the formula tests): reachable targets are met to ~1e-5. FedStain
    trains with a cheaper budget on purpose (``FedStainParams.shape_iters``,
    ``shape_fit_pixels``, ``shape_refine``: 3 iterations on 512 pixels, no
    refinement): an augmentation needs the moments moved toward the target, not
    hit, and that keeps the step a few ms per batch.

    Attributes
    ----------
    iters : int
        Levenberg-Marquardt iterations, each one vectorized pass over the pixels.
    max_fit_pixels : int or None
        Channels with more pixels are first fitted (``iters`` iterations) on a
        regular stride subsample of at most this many pixels, then refined with
        ``refine_iters`` evaluations on all pixels: ~3x faster on 128x128 patches
        (the subsample stays in cache) for a median extra error of ~2e-3 in
        skewness (~1e-5 with ``refine_iters=3``); heavy-tailed channels (excess
        kurtosis >~ 10), whose subsample moments are noisy, keep more error.
        ``None`` fits on all pixels.
    refine_iters : int
        Full-resolution evaluations after a subsampled fit; the best of them and
        the identity is kept, so the result is never worse than no-op. ``0`` uses
        the subsample fit as is (fastest; where an approximate target is as good
        as an exact one).
    """

    iters: int = 8
    max_fit_pixels: int | None = 4096
    refine_iters: int = 2

    def __post_init__(self) -> None:
        for name in ("iters", "refine_iters"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        if self.max_fit_pixels is not None and self.max_fit_pixels < 16:
            raise ValueError(
                f"max_fit_pixels must be >= 16 or None, got {self.max_fit_pixels}"
            )


#: The library default: reachable targets met to ~1e-5.
ACCURATE_FIT = ShapeFit()


def asinh_monotone(z: Tensor) -> Tensor:
    """``asinh`` as ``sign(z) log(|z| + sqrt(z^2 + 1))``.

    Every float operation here is monotone, so the result is exactly
    order-preserving (``torch.asinh`` is also several times slower on CPU). The
    absolute error is below 1e-7, irrelevant for standardized pixels. ``sinh`` and
    ``cosh`` are likewise taken from one ``exp`` and its reciprocal below.
    """
    a = z.abs()
    return torch.copysign(torch.log(a + torch.sqrt(a * a + 1.0)), z)


def _shape_and_jacobian(
    u: Tensor, u_range: tuple[Tensor, Tensor], e: Tensor, log_d: Tensor
) -> tuple[Tensor, Tensor]:
    """Skewness/excess kurtosis of ``sinh(d u + e)`` and their Jacobian.

    ``u`` is ``(B, C, N)`` with per-channel extremes ``u_range`` (``(B, C, 1)``
    each), ``e`` and ``log_d`` are ``(B, C, 1)``. Returns moments
    ``(B, C, 2)`` and the Jacobian ``(B, C, 2, 2)`` w.r.t. ``(e, log d)``
    (rows: skewness, kurtosis). ``w`` is divided by its per-channel max magnitude
    ``sinh(max |d u + e|)`` (known from the extremes of ``u``, no extra pass):
    skewness and kurtosis are scale-invariant, so the result is unchanged while
    ``w**4`` can no longer overflow.
    """
    n = u.shape[-1]
    d = log_d.exp()
    u_lo, u_hi = u_range
    a_max = torch.maximum((d * u_lo + e).abs(), (d * u_hi + e).abs())
    half_scale = 0.5 / torch.sinh(a_max).clamp_min(1e-30)
    du = d * u
    ea = torch.exp(du + e)
    inv = torch.reciprocal(ea)
    w = (ea - inv) * half_scale  # sinh(a) / max|sinh(a)|
    cw = (ea + inv) * half_scale  # d w / d e
    v = w - w.mean(dim=-1, keepdim=True)
    v2 = v * v
    v3 = v2 * v
    # vecdot fuses the product and the sum (one pass, no temporary).
    m2 = (torch.linalg.vecdot(v, v) / n).clamp_min(1e-30)
    m3 = torch.linalg.vecdot(v2, v) / n
    m4 = torch.linalg.vecdot(v2, v2) / n
    grads = []
    for g in (cw, du * cw):  # d w / d e, d w / d log(delta)
        gm = g.mean(dim=-1)
        dm2 = 2.0 * torch.linalg.vecdot(v, g) / n
        dm3 = 3.0 * torch.linalg.vecdot(v2, g) / n - 3.0 * m2 * gm
        dm4 = 4.0 * torch.linalg.vecdot(v3, g) / n - 4.0 * m3 * gm
        dskew = dm3 / m2**1.5 - 1.5 * m3 * dm2 / m2**2.5
        dkurt = dm4 / m2**2 - 2.0 * m4 * dm2 / m2**3
        grads.append(torch.stack((dskew, dkurt), dim=-1))
    moments = torch.stack((m3 / m2**1.5, m4 / m2**2 - 3.0), dim=-1)
    return moments, torch.stack(grads, dim=-1)


class Fit(NamedTuple):
    """Best-so-far state of the per-(sample, channel) fit."""

    e: Tensor  # (B, C, 1) epsilon
    log_d: Tensor  # (B, C, 1) log delta
    cost: Tensor  # (B, C) weighted squared error
    r: Tensor  # (B, C, 2) weighted residual
    jac: Tensor  # (B, C, 2, 2) weighted Jacobian
    moments: Tensor  # (B, C, 2) achieved skewness / excess kurtosis


def levenberg_marquardt(
    u: Tensor,
    target: Tensor,
    valid: Tensor,
    start: tuple[Tensor, Tensor],
    best: Fit,
    evals: int,
) -> Fit:
    """``evals`` evaluations of a damped Gauss-Newton fit on ``u = asinh(z)``.

    The first evaluation is at ``start``; each later one at a step from the best
    point so far (which starts as ``best``). A point replaces the best only if its
    cost is lower, so the returned cost never exceeds ``best.cost``.
    """
    weight = target.new_tensor([1.0, KURT_WEIGHT])
    lam = torch.full_like(best.cost, 1e-2)
    e, log_d = start
    u_range = (u.amin(dim=-1, keepdim=True), u.amax(dim=-1, keepdim=True))
    for it in range(evals):
        achieved, jac = _shape_and_jacobian(u, u_range, e, log_d)
        r = (achieved - target) * weight
        cost = torch.nan_to_num(r.square().sum(dim=-1), nan=math.inf)
        better = (cost < best.cost) & valid
        b1, b2 = better.unsqueeze(-1), better[..., None, None]
        best = Fit(
            torch.where(b1, e, best.e),
            torch.where(b1, log_d, best.log_d),
            torch.where(better, cost, best.cost),
            torch.where(b1, r, best.r),
            torch.where(b2, jac * weight.unsqueeze(-1), best.jac),
            torch.where(b1, achieved, best.moments),
        )
        # Marquardt damping: shrink after a success, grow after a failure.
        lam = torch.where(better, lam * 0.3, lam * 4.0).clamp(1e-6, 1e6)
        if it == evals - 1 or bool((~valid | (best.cost < _TOL)).all()):
            break
        e, log_d = _lm_step(best.e, best.log_d, best.r, best.jac, lam)
    return best


def _lm_step(
    e: Tensor, log_d: Tensor, r: Tensor, j: Tensor, lam: Tensor
) -> tuple[Tensor, Tensor]:
    """One damped Gauss-Newton step from ``(e, log_d)``, clipped to the bounds."""
    jtj = j.transpose(-1, -2) @ j  # (B, C, 2, 2)
    jtr = (j.transpose(-1, -2) @ r.unsqueeze(-1)).squeeze(-1)  # (B, C, 2)
    a00 = jtj[..., 0, 0] * (1.0 + lam) + 1e-12
    a11 = jtj[..., 1, 1] * (1.0 + lam) + 1e-12
    a01 = jtj[..., 0, 1]
    det = a00 * a11 - a01 * a01
    ok = torch.isfinite(det) & (det > 1e-24)
    safe_det = torch.where(ok, det, torch.ones_like(det))
    step_e = -(a11 * jtr[..., 0] - a01 * jtr[..., 1]) / safe_det
    step_d = -(a00 * jtr[..., 1] - a01 * jtr[..., 0]) / safe_det
    step_e = torch.nan_to_num(torch.where(ok, step_e, 0.0 * step_e)).clamp(
        -_MAX_STEP[0], _MAX_STEP[0]
    )
    step_d = torch.nan_to_num(torch.where(ok, step_d, 0.0 * step_d)).clamp(
        -_MAX_STEP[1], _MAX_STEP[1]
    )
    new_e = (e + step_e.unsqueeze(-1)).clamp(-EPSILON_MAX, EPSILON_MAX)
    new_log_d = (log_d + step_d.unsqueeze(-1)).clamp(_LOG_DELTA_MIN, _LOG_DELTA_MAX)
    return new_e, new_log_d
