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

import math
from typing import Literal

import torch
from torch import Tensor

from fedpath.stain._random import check_generator, rand, randint, randn
from fedpath.stain.color import ColorSpace, check_space, from_space, to_space
from fedpath.stain.moments import (
    STAT_NAMES,
    StatKind,
    channel_moments,
    check_kind,
    image_statistics,
)
from fedpath.stain.shape import ACCURATE_FIT, ShapeFit, match_shape, restyle

__all__ = ["StatPool", "randstain", "randstain_in_space"]

Distribution = Literal["normal", "laplace"]
SampleMode = Literal["fitted", "direct"]
Reading = Literal["sound", "paper"]

#: Indices of scale-type statistics (must stay positive) for each kind.
_SCALE_STATS: dict[str, tuple[int, ...]] = {
    "moments": (1,),
    "mean_std": (1,),
    "quantile_cv": (),
    "local_mean_mad": (1,),
    "mean_iqr": (1,),
    "skew_kurt": (),
}
_MIN_SCALE_FRACTION = 0.1  # fitted scale draws are floored at 10 % of the pool mean


class StatPool:
    """Pool of per-image channel statistics and their fitted per-channel laws.

    Parameters
    ----------
    stats : Tensor
        ``(P, C, k)`` statistics of ``P`` images, computed in colour space ``space``
        with :func:`fedpath.stain.moments.image_statistics` (``k`` fixed by ``kind``;
        ``(P, C, 4)`` moments for RandStain).
    space : {"rgb", "lab", "hed"}
        Colour space the statistics were computed in.
    kind : str
        Statistic kind of ``stats`` (:data:`fedpath.stain.moments.STAT_KINDS`).
    distribution : {"normal", "laplace"}
        Per-channel law fitted to each statistic (RandStainNA fits one of the two
        per statistic; here one choice for all). The Laplace law is
        variance-matched (scale ``b = std / sqrt(2)``); note RandStainNA passes the
        sample std itself as ``b``, i.e. a ``sqrt(2)`` wider law.
    std_hyper : float
        RandStainNA's widening factor: draws use ``std * (1 + std_hyper)``
        (``> -1``; RandStainNA's default -0.3 narrows, 0 keeps the pool spread).

    Raises
    ------
    ValueError
        ``"empty statistics pool: ..."`` when ``P == 0``; a message naming the
        problem for a wrong shape or non-finite entries.
    """

    def __init__(
        self,
        stats: Tensor,
        space: ColorSpace = "lab",
        kind: StatKind = "moments",
        distribution: Distribution = "normal",
        std_hyper: float = 0.0,
    ) -> None:
        self.space: ColorSpace = check_space(space)
        self.kind: StatKind = check_kind(kind)
        self.stats = _validate_stats(stats, self.kind)
        self.distribution: Distribution = "normal"
        self.std_hyper = 0.0
        self.loc = torch.empty(0)
        self.scale = torch.empty(0)
        self.fit(distribution, std_hyper)

    @classmethod
    def from_images(
        cls,
        x: Tensor,
        space: ColorSpace = "lab",
        kind: StatKind = "moments",
        distribution: Distribution = "normal",
        std_hyper: float = 0.0,
    ) -> StatPool:
        """Pool of the statistics of RGB images ``x`` ``(P, 3, H, W)`` in ``space``."""
        stats = image_statistics(to_space(x, space), kind)
        return cls(stats, space, kind, distribution, std_hyper)

    def __len__(self) -> int:
        return int(self.stats.shape[0])

    def __repr__(self) -> str:
        return (
            f"StatPool(n={len(self)}, channels={self.stats.shape[1]}, "
            f"space={self.space!r}, kind={self.kind!r}, "
            f"distribution={self.distribution!r}, std_hyper={self.std_hyper})"
        )

    def fit(
        self, distribution: Distribution | None = None, std_hyper: float | None = None
    ) -> StatPool:
        """(Re)fit the per-channel law of every statistic; returns ``self``.

        ``loc`` and ``scale`` become ``(C, k)`` tensors: the pool mean and the
        population std over the ``P`` entries (``np.std`` as in RandStainNA).
        """
        if distribution is not None:
            if distribution not in ("normal", "laplace"):
                raise ValueError(
                    f"distribution must be 'normal' or 'laplace', got {distribution!r}"
                )
            self.distribution = distribution
        if std_hyper is not None:
            if not (math.isfinite(std_hyper) and std_hyper > -1.0):
                raise ValueError(
                    f"std_hyper must be a finite float > -1, got {std_hyper}"
                )
            self.std_hyper = float(std_hyper)
        self.loc = self.stats.mean(dim=0)
        self.scale = self.stats.std(dim=0, correction=0)
        return self

    def sample(
        self, n: int, generator: torch.Generator, mode: SampleMode = "fitted"
    ) -> Tensor:
        """Draw ``n`` virtual templates, ``(n, C, k)``, on the pool's device.

        ``"direct"`` returns random pool entries (uniform with replacement);
        ``"fitted"`` draws each statistic independently from its fitted per-channel
        law with spread ``scale * (1 + std_hyper)``; scale-type statistics (std,
        IQR, local MAD) are floored at 10 % of their pool mean (and 1e-6) so they
        stay positive.
        """
        check_generator(generator)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be an int >= 0, got {n!r}")
        if mode == "direct":
            return self.stats[randint(len(self), (n,), generator, self.stats.device)]
        if mode != "fitted":
            raise ValueError(f"mode must be 'fitted' or 'direct', got {mode!r}")
        shape = (n, *self.loc.shape)
        dev, dt = self.stats.device, self.stats.dtype
        if self.distribution == "normal":
            noise = randn(shape, generator, dev, dt)
        else:
            # Inverse CDF of a unit-variance Laplace; u in (-0.5, 0.5] keeps log finite.
            u = 0.5 - rand(shape, generator, dev, dt)
            noise = -torch.sign(u) * torch.log1p(-2.0 * u.abs()) / math.sqrt(2.0)
        draws = self.loc + self.scale * (1.0 + self.std_hyper) * noise
        for i in _SCALE_STATS[self.kind]:
            floor = (_MIN_SCALE_FRACTION * self.loc[:, i]).clamp_min(1e-6)
            draws[..., i] = torch.maximum(draws[..., i], floor)
        return draws

    def to(self, device: torch.device | str) -> StatPool:
        """A copy of the pool on ``device``."""
        return StatPool(
            self.stats.to(device),
            self.space,
            self.kind,
            self.distribution,
            self.std_hyper,
        )


def _validate_stats(stats: Tensor, kind: StatKind) -> Tensor:
    if not isinstance(stats, Tensor):
        raise TypeError(
            f"pool statistics must be a torch.Tensor, got {type(stats).__name__}"
        )
    k = len(STAT_NAMES[kind])
    if stats.ndim != 3 or stats.shape[-1] != k:
        raise ValueError(
            f"pool statistics for kind {kind!r} must have shape (P, C, {k}), "
            f"got {tuple(stats.shape)}"
        )
    if stats.shape[0] == 0:
        raise ValueError(
            "empty statistics pool: got 0 entries (shape "
            f"{tuple(stats.shape)}); a pool needs statistics of at least one image"
        )
    if not stats.is_floating_point():
        raise TypeError(f"pool statistics must be floating, got {stats.dtype}")
    bad = ~torch.isfinite(stats).reshape(stats.shape[0], -1).all(dim=1)
    if bool(bad.any()):
        rows = bad.nonzero().flatten().tolist()
        raise ValueError(
            f"statistics pool has non-finite values (NaN/inf) in {len(rows)} of "
            f"{stats.shape[0]} entries (first: {rows[:5]}); drop them before pooling"
        )
    return stats.detach().to(torch.promote_types(stats.dtype, torch.float32))


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
