"""The statistics pool of RandStain and its fitted per-channel laws.

FedStain Sec. III-C (Alg. 2, lines 5-9): every client uploads per-image channel
statistics and the server returns the pool of the *other* clients' statistics. A
:class:`StatPool` holds such a pool, fits a law to every statistic of every channel
(RandStainNA, Shen et al., MICCAI 2022) and draws "virtual templates" from it,
which :func:`fedpath.stain.randstain.randstain` and MixStyle impose on images.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from fedpath.stain._random import check_generator, rand, randint, randn
from fedpath.stain.color import ColorSpace, check_space, to_space
from fedpath.stain.moments import STAT_NAMES, StatKind, check_kind, image_statistics

__all__ = ["Distribution", "SampleMode", "StatPool"]

Distribution = Literal["normal", "laplace"]
SampleMode = Literal["fitted", "direct"]

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
