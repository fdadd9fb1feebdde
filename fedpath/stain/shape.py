"""Higher-order style transfer: move skewness and kurtosis with a monotone map.

FedStain (Sec. III-D2, Alg. 1) mixes skewness ``S`` and kurtosis ``K`` (Eq. 2)
between clients, but its Algorithm 1 then uses them as an affine shift and scale
(``x_hat = K_mix * x_tilde + S_mix``), which changes neither the skewness nor the
kurtosis of ``x_tilde`` (both are affine-invariant). The sound reading implemented
here changes the *shape* of each channel's intensity distribution instead.

Transform
---------
Each standardized channel ``z`` (mean 0, std 1) goes through the sinh-arcsinh map
(Jones & Pewsey, Biometrika 2009)

    T(z) = sinh(delta * asinh(z) + epsilon),    delta > 0,

and is re-standardized. ``T`` is strictly increasing, so pixel order -- and hence
every edge and structure of the tissue -- is preserved; ``epsilon`` mainly moves
skewness and ``delta`` tail weight (kurtosis); ``(epsilon, delta) = (0, 1)`` is the
identity. The two parameters are fitted per (sample, channel) with a vectorized,
damped Gauss-Newton (Levenberg-Marquardt) iteration on the *empirical* skewness and
excess kurtosis of the transformed pixels, with an analytic Jacobian. Every step
keeps the best parameters seen so far, so the distance to the target never grows.

Reach (what callers should know)
--------------------------------
* Parameters are bounded, ``|epsilon| <= 2`` and ``delta`` in ``[0.2, 3]``, which
  bounds how far one call can move the shape (and keeps images plausible).
* Targets below the Pearson bound ``kurt >= skew**2 - 2`` are impossible for any
  distribution and are projected into the feasible region (:func:`feasible_shape`).
* Lighter-than-input tails are reached only partially: ``delta -> 0`` tends to an
  affine function of ``asinh(z)``, so very platykurtic targets (e.g. a bimodal
  excess kurtosis of -1.8 from a unimodal channel) are approached, not met.
* Monotone maps cannot change the shape of a channel with two distinct values (or
  generally redistribute the mass of tied pixels); such channels move little.
* Degenerate (constant) channels are returned as zeros, unchanged in shape.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from fedpath.stain._shash import (
    ACCURATE_FIT,
    DELTA_MAX,
    DELTA_MIN,
    EPSILON_MAX,
    KURT_WEIGHT,
    Fit,
    ShapeFit,
    asinh_monotone,
    levenberg_marquardt,
)
from fedpath.stain.moments import (
    STAT_NAMES,
    StatKind,
    channel_moments,
    check_kind,
    image_statistics,
    quantiles,
)

__all__ = [
    "ACCURATE_FIT",
    "DELTA_MAX",
    "DELTA_MIN",
    "EPSILON_MAX",
    "ShapeFit",
    "feasible_shape",
    "fit_sinh_arcsinh",
    "match_shape",
    "restyle",
    "sinh_arcsinh",
]

_PEARSON_MARGIN = 0.2  # keep projected targets strictly inside the feasible region


def sinh_arcsinh(z: Tensor, epsilon: Tensor, delta: Tensor) -> Tensor:
    """``sinh(delta * asinh(z) + epsilon)``; ``(B, C)`` parameters, ``(B, C, ...)`` z.

    Strictly increasing in ``z`` for ``delta > 0``; the identity at ``(0, 1)``.
    """
    extra = (1,) * (z.ndim - epsilon.ndim)
    e = epsilon.reshape(*epsilon.shape, *extra)
    d = delta.reshape(*delta.shape, *extra)
    ea = torch.exp(d * asinh_monotone(z) + e)
    return 0.5 * (ea - torch.reciprocal(ea))


def feasible_shape(skew: Tensor, kurt: Tensor) -> tuple[Tensor, Tensor]:
    """Project (skewness, excess kurtosis) targets into the feasible region.

    Every distribution has ``kurt >= skew**2 - 2`` (Pearson's inequality); targets
    drawn independently per statistic (``StatPool`` in ``"fitted"`` mode) can
    violate it. With margin ``m = 0.2``, an infeasible pair goes to the midpoint
    of its two axis-parallel projections onto ``kurt = skew**2 - 2 + m`` (raise
    the kurtosis / shrink the skewness toward 0, after flooring the kurtosis at
    ``-2 + m``); the region is convex, so the midpoint is feasible, and it is a
    cheap, conservative stand-in for the nearest point. Feasible pairs are
    returned unchanged.
    """
    k1 = kurt.clamp_min(-2.0 + _PEARSON_MARGIN)
    raised = torch.maximum(k1, skew * skew - 2.0 + _PEARSON_MARGIN)
    bound = torch.sqrt(k1 + 2.0 - _PEARSON_MARGIN)
    shrunk = skew.clamp(-bound, bound)
    return 0.5 * (skew + shrunk), 0.5 * (raised + k1)


def _as_bc(value: Tensor | float, ref: Tensor, name: str) -> Tensor:
    """Broadcast a scalar or tensor target to ``(B, C)`` on ``ref``'s dtype/device."""
    t = torch.as_tensor(value, dtype=ref.dtype, device=ref.device)
    try:
        t = torch.broadcast_to(t, ref.shape[:2])
    except RuntimeError:
        raise ValueError(
            f"{name} must broadcast to (B, C) = {tuple(ref.shape[:2])}, "
            f"got shape {tuple(t.shape)}"
        ) from None
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains non-finite values")
    return t


def fit_sinh_arcsinh(
    z: Tensor,
    target_skew: Tensor | float,
    target_kurt: Tensor | float,
    *,
    shape_fit: ShapeFit = ACCURATE_FIT,
    strength: float = 1.0,
    eps: float = 1e-6,
) -> tuple[Tensor, Tensor, Tensor]:
    """Fit ``(epsilon, delta)`` per (sample, channel) so that ``T(z)`` hits the targets.

    Parameters
    ----------
    z : Tensor
        ``(B, C, H, W)`` (or ``(B, C, N)``) values; they are standardized per
        (sample, channel) before fitting.
    target_skew, target_kurt : Tensor or float
        Targets broadcastable to ``(B, C)``; kurtosis is *excess* kurtosis.
        Infeasible pairs are projected with :func:`feasible_shape`.
    shape_fit : ShapeFit
        Iterations and subsampling of the fit.
    strength : float
        In ``[0, 1]``: the effective target is ``current + strength * (target -
        current)``, for both moments.
    eps : float
        Degeneracy threshold (see :func:`fedpath.stain.moments.channel_moments`).

    Returns
    -------
    (epsilon, delta, achieved) : tuple of Tensor
        ``(B, C)`` parameters (identity ``(0, 1)`` for degenerate channels) and the
        ``(B, C, 2)`` skewness/excess kurtosis that the fitted map gives on ``z``.
    """
    if not 0.0 <= strength <= 1.0:
        raise ValueError(f"strength must be in [0, 1], got {strength}")
    iters, max_fit_pixels = shape_fit.iters, shape_fit.max_fit_pixels
    refine_iters = shape_fit.refine_iters
    with torch.no_grad():
        z4 = z.detach().flatten(2).unsqueeze(2)  # (B, C, 1, N); works for B = 0
        mom = channel_moments(z4, eps)
        valid = mom.std > 0
        std = torch.where(valid, mom.std, torch.ones_like(mom.std))
        flat = z4.flatten(2).to(mom.mean.dtype)
        u = asinh_monotone((flat - mom.mean.unsqueeze(-1)) / std.unsqueeze(-1))
        ts = _as_bc(target_skew, mom.mean, "target_skew")
        tk = _as_bc(target_kurt, mom.mean, "target_kurt")
        ts = mom.skewness + strength * (ts - mom.skewness)
        tk = mom.kurtosis + strength * (tk - mom.kurtosis)
        ts, tk = feasible_shape(ts, tk)
        target = torch.stack((ts, tk), dim=-1)

        zero = torch.zeros((*mom.mean.shape, 1), dtype=u.dtype, device=u.device)
        current = torch.stack((mom.skewness, mom.kurtosis), dim=-1)
        weight = target.new_tensor([1.0, KURT_WEIGHT])
        # The identity map is the starting "best": its cost on all pixels is known.
        identity = Fit(
            zero,
            zero,
            ((current - target) * weight).square().sum(dim=-1),
            torch.zeros_like(target),
            torch.zeros((*target.shape, 2), dtype=u.dtype, device=u.device),
            current,
        )
        unseen = identity._replace(cost=torch.full_like(identity.cost, math.inf))
        n = u.shape[-1]
        if max_fit_pixels is not None and n > max_fit_pixels:
            sub = u[..., :: math.ceil(n / max_fit_pixels)]
            coarse = levenberg_marquardt(
                sub, target, valid, (zero, zero), unseen, iters + 1
            )
            if refine_iters == 0:
                epsilon = torch.where(valid, coarse.e.squeeze(-1), torch.zeros_like(ts))
                delta = torch.where(
                    valid, coarse.log_d.squeeze(-1).exp(), torch.ones_like(ts)
                )
                return epsilon, delta, coarse.moments
            # Refine from the coarse point even if it is worse than the identity
            # on all pixels (its Jacobian is what the next step needs) ...
            best = levenberg_marquardt(
                u, target, valid, (coarse.e, coarse.log_d), unseen, refine_iters
            )
            # ... and fall back to the identity if refining did not beat it.
            keep = (best.cost <= identity.cost).unsqueeze(-1)
            best = best._replace(
                e=torch.where(keep, best.e, zero),
                log_d=torch.where(keep, best.log_d, zero),
                moments=torch.where(keep, best.moments, current),
            )
        else:
            best = levenberg_marquardt(
                u, target, valid, (zero, zero), unseen, iters + 1
            )
    epsilon = torch.where(valid, best.e.squeeze(-1), torch.zeros_like(ts))
    delta = torch.where(valid, best.log_d.squeeze(-1).exp(), torch.ones_like(ts))
    return epsilon, delta, best.moments


def match_shape(
    z: Tensor,
    target_skew: Tensor | float,
    target_kurt: Tensor | float,
    *,
    shape_fit: ShapeFit = ACCURATE_FIT,
    strength: float = 1.0,
    eps: float = 1e-6,
) -> Tensor:
    """Monotone per-(sample, channel) reshaping toward target skewness and kurtosis.

    The sound reading of FedStain's higher-order style step (module docstring):
    ``y = standardize(sinh(delta * asinh(z) + epsilon))`` with ``(epsilon, delta)``
    from :func:`fit_sinh_arcsinh`.

    Parameters
    ----------
    z : Tensor
        ``(B, C, H, W)`` floating tensor, standardized per (sample, channel)
        (re-standardized internally, so small deviations do not matter).
    target_skew, target_kurt : Tensor or float
        Targets broadcastable to ``(B, C)``; ``target_kurt`` is **excess** kurtosis.
    shape_fit : ShapeFit
        Budget of the fit; the default reaches reachable targets to ~1e-5.
    strength : float
        In ``[0, 1]``; interpolates the targets from the current moments (0 = no
        change) to the requested ones (1).
    eps : float
        Degeneracy threshold; constant channels come back as zeros.

    Returns
    -------
    Tensor
        Same shape and dtype as ``z``; per (sample, channel) mean 0 and population
        std 1, pixel order preserved. Gradients flow to ``z`` through ``T`` with the
        fitted parameters and the re-standardization statistics detached (as
        MixStyle detaches its statistics).
    """
    if not isinstance(z, Tensor) or z.ndim != 4 or not z.is_floating_point():
        raise ValueError("z must be a floating (B, C, H, W) tensor")
    epsilon, delta, _ = fit_sinh_arcsinh(
        z, target_skew, target_kurt, shape_fit=shape_fit, strength=strength, eps=eps
    )
    mom = channel_moments(z.detach(), eps)
    valid = (mom.std > 0)[..., None, None]
    std = torch.where(mom.std > 0, mom.std, torch.ones_like(mom.std))
    zs = (z - mom.mean[..., None, None]) / std[..., None, None]
    w = sinh_arcsinh(zs, epsilon, delta)
    wm = channel_moments(w.detach(), eps)
    w_std = torch.where(wm.std > 0, wm.std, torch.ones_like(wm.std))
    out = (w - wm.mean[..., None, None]) / w_std[..., None, None]
    return torch.where(valid, out, torch.zeros_like(out)).to(z.dtype)


def _split(stats: Tensor, kind: StatKind, ref: Tensor, name: str) -> tuple[Tensor, ...]:
    k = len(STAT_NAMES[kind])
    want = (ref.shape[0], ref.shape[1], k)
    if not isinstance(stats, Tensor) or tuple(stats.shape) != want:
        got = tuple(stats.shape) if isinstance(stats, Tensor) else type(stats).__name__
        raise ValueError(f"{name} for kind {kind!r} must have shape {want}, got {got}")
    if not bool(torch.isfinite(stats).all()):
        raise ValueError(f"{name} contains non-finite values")
    stats = stats.to(
        device=ref.device, dtype=torch.promote_types(ref.dtype, torch.float32)
    )
    return tuple(stats[..., i] for i in range(k))


def _safe_ratio(num: Tensor, den: Tensor, loc: Tensor, eps: float) -> Tensor:
    """``num / den`` where ``den`` is a usable scale, else 1 (shift only).

    A degenerate source scale (constant channel) would turn float rounding noise
    into full-contrast texture; keeping the gain at 1 only moves its location.
    Negative target scales (never produced by the pools) are clamped to 0.
    """
    usable = den > eps * (1.0 + loc.abs())
    ratio = num.clamp_min(0.0) / torch.where(usable, den, torch.ones_like(den))
    return torch.where(usable & torch.isfinite(ratio), ratio, torch.ones_like(ratio))


def restyle(
    x: Tensor,
    source_stats: Tensor | None,
    target_stats: Tensor,
    kind: StatKind,
    *,
    window: int = 8,
    eps: float = 1e-6,
    shape_fit: ShapeFit = ACCURATE_FIT,
    strength: float = 1.0,
) -> Tensor:
    """Transform ``x`` from its statistics to ``target_stats`` (FedStain Table V).

    Parameters
    ----------
    x : Tensor
        ``(B, C, H, W)`` values in the space the statistics live in.
    source_stats : Tensor or None
        ``(B, C, k)`` statistics of ``x`` for ``kind``
        (:func:`fedpath.stain.moments.image_statistics`); ``None`` computes them.
    target_stats : Tensor
        ``(B, C, k)`` statistics to move to.
    kind : str
        * ``"mean_std"``: ``(x - m) / s * s' + m'`` (Reinhard; sound Eq. 1).
        * ``"mean_iqr"``: ``(x - m) * iqr' / iqr + m'``.
        * ``"local_mean_mad"``: ``(x - lm) * lmad' / lmad + lm'`` (both statistics
          are affine-equivariant, so the map is exact).
        * ``"quantile_cv"``: the affine ``y = s (x - q90) + q90'`` with
          ``s = q90' / (q90 - mean + std / cv')`` solving ``q90(y) = q90'`` and
          ``cv(y) = cv'`` (needs ``s > 0``; otherwise only the quantile is matched).
        * ``"skew_kurt"``: :func:`match_shape` with the mean and std of ``x`` kept.
        * ``"moments"``: affine to the target mean/std plus :func:`match_shape` to
          the target skewness/kurtosis.
    window, eps : int, float
        As in :func:`~fedpath.stain.moments.image_statistics`.
    shape_fit, strength : ShapeFit, float
        Passed to :func:`match_shape` for the shape kinds.

    Returns
    -------
    Tensor
        ``x`` restyled, same shape and dtype (not clamped: it is still in the
        statistics' space). Degenerate source channels are only shifted.
    """
    kind = check_kind(kind)
    if source_stats is None:
        source_stats = image_statistics(x, kind, window=window, eps=eps)
    src = _split(source_stats, kind, x, "source_stats")
    tgt = _split(target_stats, kind, x, "target_stats")
    xw = x.to(src[0].dtype)

    def bc(t: Tensor) -> Tensor:
        return t[..., None, None]

    def reshaped(loc: Tensor, scale: Tensor, skew: Tensor, kurt: Tensor) -> Tensor:
        """``x`` standardized with ``(loc, scale)``, reshaped to ``(skew, kurt)``."""
        std = torch.where(scale > 0, scale, torch.ones_like(scale))
        z = (xw - bc(loc)) / bc(std)
        return match_shape(
            z, skew, kurt, shape_fit=shape_fit, strength=strength, eps=eps
        )

    if kind in ("mean_std", "mean_iqr", "local_mean_mad"):
        gain = _safe_ratio(tgt[1], src[1], src[0], eps)
        out = (xw - bc(src[0])) * bc(gain) + bc(tgt[0])
    elif kind == "quantile_cv":
        mom = channel_moments(xw, eps)
        q90 = quantiles(xw, (0.9,))[..., 0]
        # cv' -> 0 asks for a flat channel: std / cv' -> inf, gain -> 0, y -> q90'.
        cv_t = torch.where(tgt[1].abs() > 1e-12, tgt[1], torch.full_like(tgt[1], 1e-12))
        den = (q90 - mom.mean) + mom.std / cv_t
        gain = tgt[0] / torch.where(den > 0, den, torch.ones_like(den))
        ok = torch.isfinite(gain) & (gain >= 0) & (mom.std > 0) & (den > 0)
        gain = torch.where(ok, gain, torch.ones_like(gain))
        out = (xw - bc(q90)) * bc(gain) + bc(tgt[0])
    elif kind == "skew_kurt":  # keeps the mean and std of x
        mom = channel_moments(xw, eps)
        shaped = reshaped(mom.mean, mom.std, tgt[0], tgt[1])
        out = shaped * bc(mom.std) + bc(mom.mean)
    else:  # moments
        shaped = reshaped(src[0], src[1], tgt[2], tgt[3])
        out = shaped * bc(tgt[1].clamp_min(0.0)) + bc(tgt[0])
    return out.to(x.dtype)
