"""Level-1 RandStain: stain augmentation from a pool of exchanged image statistics.

FedStain Sec. III-C (Eq. 1) builds on RandStainNA (Shen et al., MICCAI 2022): each
client uploads per-image channel statistics, the server returns the pool of the
*other* clients' statistics (Alg. 2, lines 5-9), and every training image is
re-coloured, with probability ``p`` (paper: 0.9), to a "virtual template" drawn
from that pool. FedStain's pool stores the four moments of :func:`channel_moments`,
so besides mean and std a template also carries skewness and excess kurtosis, which
:func:`fedpath.stain.shape.match_shape` imposes with an order-preserving map.

A pool of one Table V pair (FedStain Table V: the clients exchange only that pair)
imposes only that pair, so each row of the ablation uses what its label says:
``mean_std`` is plain RandStainNA (no shape step: per channel an affine map, which
leaves skewness and kurtosis as they were), ``skew_kurt`` only the shape step (mean
and std of the image kept), and the other pairs the transfer of
:func:`fedpath.stain.shape.restyle`.

Eq. 1 as printed, ``x' = (x - mu) * sigma' + mu'``, omits the division by ``sigma``;
the default ``reading="sound"`` is the Reinhard/RandStainNA transfer
``(x - mu) / sigma * sigma' + mu'`` (output std = ``sigma'``), and
``reading="paper"`` keeps the literal formula (output std = ``sigma * sigma'``;
for reproduction only -- in LAB it multiplies contrast by ~10).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from fedpath.stain._random import check_generator, rand
from fedpath.stain.color import ColorSpace, check_space, from_space, to_space
from fedpath.stain.moments import StatKind, channel_moments
from fedpath.stain.pool import SampleMode, StatPool
from fedpath.stain.shape import ACCURATE_FIT, ShapeFit, match_shape, restyle

__all__ = ["randstain", "randstain_in_space"]

Reading = Literal["sound", "paper"]


def randstain_in_space(
    y: Tensor,
    targets: Tensor,
    higher_order: bool = True,
    strength: float = 1.0,
    reading: Reading = "sound",
    shape_fit: ShapeFit = ACCURATE_FIT,
    eps: float = 1e-6,
) -> Tensor:
    """The deterministic core of RandStain, in the colour space (no clamping).

    Parameters
    ----------
    y : Tensor
        ``(B, C, H, W)`` images already in the pool's colour space.
    targets : Tensor
        ``(B, C, 4)`` templates (mean, std, skewness, excess kurtosis).
    higher_order : bool
        Also move skewness/kurtosis with :func:`match_shape` (FedStain); ``False``
        gives plain RandStainNA.
    strength : float
        :func:`match_shape` strength in ``[0, 1]`` (the mean/std are always matched).
    reading : {"sound", "paper"}
        Eq. 1 reading (module docstring).
    shape_fit, eps : ShapeFit, float
        Passed to :func:`match_shape` / :func:`channel_moments`.

    Returns
    -------
    Tensor
        ``(B, C, H, W)``; per channel a monotone map of ``y`` (pixel order kept).
    """
    if targets.shape != (*y.shape[:2], 4):
        raise ValueError(
            f"targets must have shape {(*y.shape[:2], 4)}, got {tuple(targets.shape)}"
        )
    if reading not in ("sound", "paper"):
        raise ValueError(f"reading must be 'sound' or 'paper', got {reading!r}")
    mom = channel_moments(y, eps)
    tgt = targets.to(device=y.device, dtype=mom.mean.dtype)
    valid = mom.std > 0
    std = torch.where(valid, mom.std, torch.ones_like(mom.std))
    z = (y.to(mom.mean.dtype) - mom.mean[..., None, None]) / std[..., None, None]
    if higher_order:
        z = match_shape(
            z, tgt[..., 2], tgt[..., 3], shape_fit=shape_fit, strength=strength, eps=eps
        )
    # Sound: output std sigma'. Literal Eq. 1: sigma * sigma'. A constant channel
    # has z = 0 either way and moves to mu'.
    out_std = tgt[..., 1] if reading == "sound" else mom.std * tgt[..., 1]
    out = z * out_std[..., None, None] + tgt[..., 0, None, None]
    return out.to(y.dtype)


def _apply_templates(
    y: Tensor,
    targets: Tensor,
    kind: StatKind,
    higher_order: bool,
    strength: float,
    reading: Reading,
    shape_fit: ShapeFit,
) -> Tensor:
    """Move images ``y`` (in the pool's space) to templates of statistic ``kind``.

    ``moments``: :func:`randstain_in_space` (mean/std, and the shape step if
    ``higher_order``). ``mean_std``: the same without the shape step (RandStainNA;
    both readings of Eq. 1). ``skew_kurt``: only the shape step, the image's mean
    and std kept. The other Table V pairs: :func:`fedpath.stain.shape.restyle`
    (:func:`_check_pool_use` has rejected what they cannot do).
    """
    if kind == "moments":
        return randstain_in_space(
            y, targets, higher_order, strength, reading, shape_fit=shape_fit
        )
    if kind == "mean_std":
        # no skewness/kurtosis in the template: the shape step is off whatever
        # higher_order says, so the placeholder columns are never read
        padded = torch.cat((targets, torch.zeros_like(targets)), dim=-1)
        return randstain_in_space(y, padded, False, strength, reading)
    return restyle(y, None, targets, kind, shape_fit=shape_fit, strength=strength)


def _check_pool_use(kind: StatKind, higher_order: bool, reading: Reading) -> None:
    """Raise ``ValueError`` for what a pool of ``kind`` cannot do.

    Only ``moments`` and ``mean_std`` templates carry a std for Eq. 1's literal
    reading; a ``skew_kurt`` pool without the shape step would leave every image
    as it is (a silent no-op, so an error).
    """
    if reading not in ("sound", "paper"):
        raise ValueError(f"reading must be 'sound' or 'paper', got {reading!r}")
    if reading == "paper" and kind not in ("moments", "mean_std"):
        raise ValueError(
            f"reading='paper' is Eq. 1 on a mean/std template; a {kind!r} pool "
            "has none (use a 'moments' or 'mean_std' pool)"
        )
    if kind == "skew_kurt" and not higher_order:
        raise ValueError(
            "a 'skew_kurt' pool only has the shape step to apply; with "
            "higher_order=False RandStain would return the images unchanged"
        )


def randstain(
    x: Tensor,
    pool: StatPool,
    generator: torch.Generator,
    space: ColorSpace | None = None,
    p: float = 0.9,
    mode: SampleMode = "fitted",
    higher_order: bool = True,
    strength: float = 1.0,
    reading: Reading = "sound",
    shape_fit: ShapeFit = ACCURATE_FIT,
) -> Tensor:
    """RandStain (FedStain Eq. 1, sound reading) with higher-order shape matching.

    For each image, independently with probability ``p``: convert to ``space``,
    draw a template from ``pool`` and move the image to it, convert back and clamp
    to ``[0, 1]``. With a ``moments`` pool (FedStain) the template is
    ``(mu', sigma', S', K')`` and each channel goes to
    ``(x - mu) / sigma * sigma' + mu'`` after (if ``higher_order``) reshaping its
    standardized values toward ``(S', K')`` with :func:`match_shape`. A pool of a
    Table V pair imposes only that pair (module docstring): ``mean_std`` is the
    affine transfer alone, ``skew_kurt`` the reshaping alone with the image's own
    mean and std kept, the others :func:`fedpath.stain.shape.restyle`.

    Parameters
    ----------
    x : Tensor
        ``(B, 3, H, W)`` RGB in ``[0, 1]``.
    pool : StatPool
        Pool of other images'/clients' statistics, of any kind.
    generator : torch.Generator
        Randomness. Draw order: the ``B`` templates (``pool.sample``), then the
        ``B`` Bernoulli(p) selections.
    space : {"rgb", "lab", "hed"} or None
        Colour space; ``None`` uses ``pool.space`` (a different value is an error,
        since statistics only make sense in the space they were computed in).
    p : float
        Per-image application probability (paper: 0.9).
    mode : {"fitted", "direct"}
        Template sampling (:meth:`StatPool.sample`).
    higher_order : bool
        The shape step, for pools that hold skewness/kurtosis (``moments``,
        ``skew_kurt``; ``False`` with ``skew_kurt`` is an error, as it would
        leave the images unchanged); the other pools have none to apply.
    strength, reading, shape_fit
        See :func:`randstain_in_space`; ``reading="paper"`` needs a ``moments``
        or ``mean_std`` pool.

    Returns
    -------
    Tensor
        ``(B, 3, H, W)`` RGB in ``[0, 1]``; unselected images are exact copies.
    """
    check_generator(generator)
    if not isinstance(pool, StatPool):
        raise TypeError(f"pool must be a StatPool, got {type(pool).__name__}")
    space = pool.space if space is None else check_space(space)
    if space != pool.space:
        raise ValueError(
            f"space {space!r} differs from the pool's space {pool.space!r}; "
            "statistics must be applied in the space they were computed in"
        )
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    if x.ndim != 4 or x.shape[1] != pool.stats.shape[1]:
        raise ValueError(
            f"x must have shape (B, {pool.stats.shape[1]}, H, W), got {tuple(x.shape)}"
        )
    _check_pool_use(pool.kind, higher_order, reading)
    b = x.shape[0]
    targets = pool.sample(b, generator, mode).to(x.device)
    chosen = (rand((b,), generator, x.device) < p).nonzero().flatten()
    out = x.clone()
    if chosen.numel() == 0:
        return out
    y = to_space(x[chosen], space)
    y = _apply_templates(
        y, targets[chosen], pool.kind, higher_order, strength, reading, shape_fit
    )
    out[chosen] = from_space(y, space).to(x.dtype)
    return out
