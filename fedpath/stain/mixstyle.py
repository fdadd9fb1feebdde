"""MixStyle with higher-order statistics (FedStain Sec. III-D2, Algorithm 1).

Two entry points:

* :func:`mixstyle` -- pixel-level, cross-client MixStyle as FedStain/FedCCRL apply
  it to input images: each image mixes its own statistics with those of a random
  entry of the pool received from the other clients.
* :func:`mixstyle_features` -- the original in-network MixStyle of Zhou et al.
  (ICLR 2021) on feature maps, with an optional higher-order variant.
* :func:`mix_feature_statistics` -- feature-map MixStyle toward given partner
  rows, for any statistic kind: FedStain's ``mixstyle_level="features"`` mixes
  each augmented view's feature statistics with those of the same image's
  RandStain version (other sites' stains, from the exchanged pixel statistics).

Paper inconsistency
-------------------
Algorithm 1 line 10 computes ``x_hat = K_mix * x_tilde + S_mix``: the mixed
kurtosis is used as a *scale* and the mixed skewness as a *shift* of the
standardized image. That leaves the skewness and kurtosis of ``x_tilde``
unchanged (both are affine-invariant) and discards the image's own mean and std,
so it cannot transfer the shape statistics the method is about. ``mode="sound"``
(default) mixes all four moments and applies them properly: standardize, reshape
to the mixed skewness/kurtosis with the monotone :func:`match_shape`, rescale to
the mixed mean/std. ``mode="paper"`` implements line 10 literally (with Eq. 2's
Pearson kurtosis, i.e. excess + 3) for reproduction only.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from fedpath.stain._random import check_generator, rand, randint, sample_beta
from fedpath.stain.color import ColorSpace, check_space, from_space, to_space
from fedpath.stain.moments import (
    StatKind,
    channel_moments,
    check_kind,
    image_statistics,
)
from fedpath.stain.pool import StatPool
from fedpath.stain.shape import ACCURATE_FIT, ShapeFit, match_shape, restyle

__all__ = ["mix_feature_statistics", "mixstyle", "mixstyle_features"]

MixMode = Literal["sound", "paper"]
#: mixstyle_features' default budget: 4 iterations, the rest as ACCURATE_FIT
FEATURE_FIT = ShapeFit(iters=4)


def mixstyle(
    x: Tensor,
    pool: StatPool,
    generator: torch.Generator,
    alpha: float = 0.1,
    space: ColorSpace | None = None,
    mode: MixMode = "sound",
    kind: StatKind | None = None,
    shape_fit: ShapeFit = ACCURATE_FIT,
) -> Tensor:
    """Cross-client pixel-level MixStyle (FedStain Algorithm 1).

    Per sample: ``lambda ~ Beta(alpha, alpha)`` and a uniformly random pool entry.

    * ``mode="sound"``: ``mixed = lambda * own + (1 - lambda) * entry`` for all
      statistics of ``kind`` (as in Zhou et al., ``lambda`` weights the sample's
      own style); then :func:`fedpath.stain.shape.restyle` moves the image from
      ``own`` to ``mixed``. For ``kind="moments"`` this standardizes, reshapes to the
      mixed skewness/kurtosis and rescales with the mixed mean/std; the Table V
      pairs mix and apply only that pair.
      Images whose ``lambda`` is within 1e-3 of 1 keep their own style and are
      returned unchanged (no restyling to almost themselves).
    * ``mode="paper"`` (reproduction only): literal Alg. 1,
      ``beta = lambda * S' + (1 - lambda) * S(x)``,
      ``gamma = lambda * K' + (1 - lambda) * K(x)`` with Pearson kurtosis (Eq. 2, not
      excess), ``x_hat = gamma * (x - mu) / sigma + beta`` in the space's units,
      then back to RGB and clamped to ``[0, 1]``. This saturates most pixels (a
      standardized image scaled by ~3) and ignores ``kind`` beyond needing
      skewness and kurtosis in the pool.

    Parameters
    ----------
    x : Tensor
        ``(B, 3, H, W)`` RGB in ``[0, 1]``.
    pool : StatPool
        Pool of other clients' statistics of kind ``kind`` in space ``space``.
    generator : torch.Generator
        Randomness. Draw order: ``B`` pool indices, then ``B`` Beta draws.
    alpha : float
        Beta concentration (MixStyle/FedCCRL default 0.1).
    space : {"rgb", "lab", "hed"} or None
        ``None`` uses ``pool.space``; must equal it otherwise.
    mode : {"sound", "paper"}
        See above.
    kind : str or None
        Statistic kind to mix; ``None`` uses ``pool.kind``; must equal it otherwise.
        ``mode="paper"`` needs ``"moments"`` or ``"skew_kurt"``.
    shape_fit : ShapeFit
        Budget of :func:`match_shape` for the shape kinds.

    Returns
    -------
    Tensor
        ``(B, 3, H, W)`` RGB in ``[0, 1]``.
    """
    check_generator(generator)
    if not isinstance(pool, StatPool):
        raise TypeError(f"pool must be a StatPool, got {type(pool).__name__}")
    space = pool.space if space is None else check_space(space)
    kind = pool.kind if kind is None else check_kind(kind)
    if space != pool.space or kind != pool.kind:
        raise ValueError(
            f"requested (space, kind) = {(space, kind)} but the pool holds "
            f"{(pool.space, pool.kind)}; statistics must be mixed as computed"
        )
    if mode not in ("sound", "paper"):
        raise ValueError(f"mode must be 'sound' or 'paper', got {mode!r}")
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"x must have shape (B, 3, H, W), got {tuple(x.shape)}")
    b = x.shape[0]
    entry = pool.stats[randint(len(pool), (b,), generator, pool.stats.device)]
    lam = sample_beta(alpha, alpha, (b,), generator, x.device)
    y = to_space(x, space)
    entry = entry.to(device=x.device, dtype=torch.promote_types(y.dtype, torch.float32))
    if mode == "sound":
        # With alpha = 0.1 about a third of the lambdas fall within 1e-3 of 1 (the
        # image keeps its own style); those images are returned untouched instead
        # of being restyled to (almost) themselves, which saves the shape fit.
        active = lam < 1.0 - 1e-3
        out = x.clone()
        if bool(active.any()):
            ya = y[active]
            own = image_statistics(ya, kind)
            lam3 = lam[active].to(own.dtype)[:, None, None]
            mixed = lam3 * own + (1.0 - lam3) * entry[active]
            styled = restyle(ya, own, mixed, kind, shape_fit=shape_fit)
            out[active] = from_space(styled, space).to(x.dtype)
        return out
    if kind not in ("moments", "skew_kurt"):
        raise ValueError(
            f"mode='paper' needs skewness/kurtosis in the pool, got {kind!r}"
        )
    first = 2 if kind == "moments" else 0
    mom = channel_moments(y)
    lam2 = lam.to(mom.mean.dtype)[:, None]
    beta_mix = lam2 * entry[..., first] + (1.0 - lam2) * mom.skewness
    # Eq. 2 kurtosis is Pearson's: the stored excess kurtosis + 3.
    gamma_mix = lam2 * (entry[..., first + 1] + 3.0) + (1.0 - lam2) * (
        mom.kurtosis + 3.0
    )
    std = torch.where(mom.std > 0, mom.std, torch.ones_like(mom.std))
    x_tilde = (y - mom.mean[..., None, None]) / std[..., None, None]
    x_hat = gamma_mix[..., None, None] * x_tilde + beta_mix[..., None, None]
    return from_space(x_hat, space).to(x.dtype)


def mixstyle_features(
    f: Tensor,
    generator: torch.Generator,
    alpha: float = 0.1,
    p: float = 0.5,
    higher_order: bool = False,
    eps: float = 1e-6,
    shape_fit: ShapeFit = FEATURE_FIT,
) -> Tensor:
    """Feature-map MixStyle (Zhou et al., ICLR 2021), optionally higher-order.

    With probability ``p`` per *batch* (one draw, as in the reference code):
    ``perm`` = random permutation of the batch, ``lambda ~ Beta(alpha, alpha)`` per
    sample, ``mu`` / ``sigma = sqrt(var + eps)`` (unbiased variance) per (sample,
    channel), both detached, and

        ``out = (f - mu) / sigma * sigma_mix + mu_mix``,
        ``sigma_mix = lambda * sigma + (1 - lambda) * sigma[perm]`` (same for mu).

    With ``higher_order=True`` the standardized map is first reshaped by
    :func:`match_shape` to the equally mixed skewness and excess kurtosis (fitted
    on detached features; gradients flow through the fixed monotone map).

    Always active when called: the caller disables it at evaluation time (Zhou et
    al. apply it only in training, after ResNet stages 1-3, never after the last).

    Parameters
    ----------
    f : Tensor
        ``(B, C, H, W)`` features.
    generator : torch.Generator
        Randomness. Draw order: the gate, then (if applied) the permutation and the
        ``B`` Beta draws.
    alpha, p, eps : float
        Beta concentration, batch probability, variance epsilon (defaults 0.1,
        0.5, 1e-6 as in the reference code).
    higher_order : bool
        Also mix skewness and kurtosis (FedStain).
    shape_fit : ShapeFit
        Budget of :func:`match_shape` for ``higher_order`` (default: 4 iterations,
        the rest as :data:`~fedpath.stain.shape.ACCURATE_FIT`).

    Returns
    -------
    Tensor
        Same shape and dtype as ``f`` (``f`` itself when not applied or ``B < 2``).
    """
    check_generator(generator)
    if f.ndim != 4 or not f.is_floating_point():
        raise ValueError(
            f"f must be a floating (B, C, H, W) tensor, got {tuple(f.shape)}"
        )
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    b = f.shape[0]
    if float(rand((1,), generator)[0]) >= p or b < 2:
        return f
    perm = torch.randperm(b, generator=generator, device=generator.device).to(f.device)
    lam = sample_beta(alpha, alpha, (b,), generator, f.device, f.dtype)[
        :, None, None, None
    ]
    n = f.shape[2] * f.shape[3]
    fd = f.detach()
    mu = fd.mean(dim=(2, 3), keepdim=True)
    var = fd.var(dim=(2, 3), keepdim=True, correction=1 if n > 1 else 0)
    sig = (var + eps).sqrt()
    normed = (f - mu) / sig
    if higher_order:
        mom = channel_moments(fd)
        lam2 = lam[:, :, 0, 0].to(mom.mean.dtype)
        skew = lam2 * mom.skewness + (1 - lam2) * mom.skewness[perm]
        kurt = lam2 * mom.kurtosis + (1 - lam2) * mom.kurtosis[perm]
        # match_shape returns population-std-1 maps; restore normed's own spread so
        # only the shape changes before the MixStyle rescaling.
        spread = (mom.std[..., None, None] / sig).to(f.dtype)
        normed = match_shape(normed, skew, kurt, shape_fit=shape_fit) * spread
    mu_mix = lam * mu + (1 - lam) * mu[perm]
    sig_mix = lam * sig + (1 - lam) * sig[perm]
    return normed * sig_mix + mu_mix


def mix_feature_statistics(
    f: Tensor,
    partner: Tensor,
    lam: Tensor,
    kind: StatKind = "moments",
    shape_fit: ShapeFit = FEATURE_FIT,
) -> Tensor:
    """Feature-map MixStyle of ``f`` toward the statistics of ``partner``'s rows.

    Per row ``i`` and channel: ``mixed = lam[i] * own + (1 - lam[i]) * partner_i``
    for the statistics of ``kind`` (:func:`~fedpath.stain.moments.image_statistics`
    over the spatial positions of the map), then
    :func:`~fedpath.stain.shape.restyle` moves row ``i`` from ``own`` to
    ``mixed`` (``"moments"``: standardize, reshape to the mixed skewness and
    excess kurtosis, rescale to the mixed mean and std; ``"mean_std"``: Zhou et
    al.'s affine MixStyle). ``lam`` weights the row's own style, as in
    :func:`mixstyle`. Unlike :func:`mixstyle_features`, which mixes with a random
    permutation of the batch, the partners are given: FedStain passes the
    feature maps of the same images' RandStain versions, so what is mixed in is
    the feature-space style of another site's stain (see ``docs/fedstain.md``).

    The mixed statistics are computed on detached maps (as MixStyle detaches
    them): gradients flow to ``f`` through the restyling map (for
    ``skew_kurt`` and ``quantile_cv``, :func:`restyle` also re-reads ``f``'s own
    mean and std, with their gradients), never to ``partner``. Rows
    whose ``lam`` is within 1e-3 of 1 keep their style and are returned
    unchanged, as in :func:`mixstyle`.

    Parameters
    ----------
    f : Tensor
        ``(B, C, H, W)`` floating feature maps to restyle.
    partner : Tensor
        ``(B, C, H', W')`` feature maps whose statistics row ``i`` mixes in
        (same channels; the spatial size may differ).
    lam : Tensor
        ``(B,)`` mixing weights in ``[0, 1]`` (FedStain: ``Beta(alpha, alpha)``).
    kind : str
        Statistic kind mixed and applied (FedStain: its ``statistics``).
    shape_fit : ShapeFit
        Budget of :func:`match_shape` for the shape kinds.

    Returns
    -------
    Tensor
        A new tensor of ``f``'s shape and dtype (``f`` itself when no row is
        mixed).
    """
    kind = check_kind(kind)
    if f.ndim != 4 or not f.is_floating_point():
        raise ValueError(
            f"f must be a floating (B, C, H, W) tensor, got {tuple(f.shape)}"
        )
    if partner.ndim != 4 or partner.shape[:2] != f.shape[:2]:
        raise ValueError(
            f"partner must have shape ({f.shape[0]}, {f.shape[1]}, H, W) like f, "
            f"got {tuple(partner.shape)}"
        )
    if tuple(lam.shape) != (f.shape[0],):
        raise ValueError(f"lam must have shape ({f.shape[0]},), got {tuple(lam.shape)}")
    active = (lam < 1.0 - 1e-3).to(f.device)
    if not bool(active.any()):
        return f
    fa = f[active]
    own = image_statistics(fa.detach(), kind)
    other = image_statistics(partner[active].detach(), kind).to(own.dtype)
    lam3 = lam.to(device=f.device, dtype=own.dtype)[active][:, None, None]
    mixed = lam3 * own + (1.0 - lam3) * other
    styled = restyle(fa, own, mixed, kind, shape_fit=shape_fit).to(f.dtype)
    if bool(active.all()):
        return styled
    # index_put keeps autograd through both the kept rows and the restyled ones
    return f.index_put((active.nonzero()[:, 0],), styled)
