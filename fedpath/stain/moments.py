"""Per-image, per-channel stain statistics (FedStain Eq. 2 and the Table V pairs).

All statistics are *population* (biased) statistics over the ``H * W`` pixels of
each (sample, channel), computed in one vectorized pass over the batch:

* :func:`channel_moments` -- mean, standard deviation, skewness and **excess**
  kurtosis (FedStain Eq. 2 defines Pearson kurtosis ``E[(x-mu)^4] / sigma^4``; we
  store ``Pearson - 3`` so that a Gaussian has 0 -- add 3 where Eq. 2's scale is
  needed, as :func:`fedpath.stain.mixstyle.mixstyle` does in ``mode="paper"``).
* :func:`image_statistics` -- the four moments or one of the five statistic pairs
  of FedStain's ablation (Table V).

Degenerate channels: a channel whose standard deviation is at most
``eps * (1 + |mean|)`` (a constant channel, e.g. an all-white background patch, up
to float rounding) reports ``std = 0``, skewness 0 and excess kurtosis 0 -- the
values of a Gaussian, i.e. "no shape information" -- instead of 0/0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

__all__ = [
    "STAT_KINDS",
    "STAT_NAMES",
    "Moments",
    "StatKind",
    "channel_moments",
    "check_kind",
    "image_statistics",
    "quantiles",
    "windowed_median_abs_dev",
]

StatKind = Literal[
    "moments", "mean_std", "quantile_cv", "local_mean_mad", "mean_iqr", "skew_kurt"
]
STAT_KINDS: tuple[str, ...] = get_args(StatKind)
#: Names of the ``k`` statistics along the last axis of :func:`image_statistics`.
STAT_NAMES: dict[str, tuple[str, ...]] = {
    "moments": ("mean", "std", "skewness", "excess_kurtosis"),
    "mean_std": ("mean", "std"),
    "quantile_cv": ("q90", "cv"),
    "local_mean_mad": ("local_mean", "local_mad"),
    "mean_iqr": ("mean", "iqr"),
    "skew_kurt": ("skewness", "excess_kurtosis"),
}


def check_kind(kind: object) -> StatKind:
    """Validate a statistic kind; raise ValueError listing the valid ones."""
    if kind not in STAT_KINDS:
        raise ValueError(
            f"unknown statistic kind {kind!r}; expected one of {STAT_KINDS}"
        )
    return kind  # type: ignore[return-value]


def _work_dtype(x: Tensor) -> torch.dtype:
    # Reductions of half-precision tensors lose too much; work in at least float32.
    return torch.promote_types(x.dtype, torch.float32)


def _flat(x: Tensor) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != 4:
        raise ValueError(f"x must have shape (B, C, H, W), got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating tensor, got {x.dtype}")
    if x.shape[2] * x.shape[3] == 0:
        raise ValueError("x has no pixels (H * W == 0)")
    b, c, h, w = x.shape
    return x.reshape(b, c, h * w).to(_work_dtype(x))


@dataclass(frozen=True)
class Moments:
    """Per-(sample, channel) moments; every field is a ``(B, C)`` tensor.

    Attributes
    ----------
    mean : Tensor
        Channel mean.
    std : Tensor
        Population standard deviation (``ddof=0``); 0 for degenerate channels.
    skewness : Tensor
        ``E[(x - mean)^3] / std^3`` (FedStain Eq. 2, ``S_c``); 0 when degenerate.
    kurtosis : Tensor
        **Excess** (Fisher) kurtosis ``E[(x - mean)^4] / std^4 - 3``: 0 for a
        Gaussian, i.e. FedStain Eq. 2's ``K_c`` minus 3; 0 when degenerate.
    """

    mean: Tensor
    std: Tensor
    skewness: Tensor
    kurtosis: Tensor

    def as_tensor(self) -> Tensor:
        """Stack to ``(B, C, 4)`` in the order (mean, std, skewness, kurtosis)."""
        return torch.stack((self.mean, self.std, self.skewness, self.kurtosis), dim=-1)

    @classmethod
    def from_tensor(cls, t: Tensor) -> Moments:
        """Inverse of :meth:`as_tensor`: split a ``(..., 4)`` tensor into fields."""
        if not isinstance(t, Tensor) or t.ndim < 1 or t.shape[-1] != 4:
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"expected a (..., 4) moments tensor, got {shape}")
        return cls(t[..., 0], t[..., 1], t[..., 2], t[..., 3])


def channel_moments(x: Tensor, eps: float = 1e-6) -> Moments:
    """Population moments of each channel of each image (FedStain Eq. 2).

    Equals ``scipy.stats.skew(bias=True)`` and
    ``scipy.stats.kurtosis(fisher=True, bias=True)`` over the flattened pixels.
    Central moments are taken about the mean computed first (two-pass), which
    avoids the cancellation of raw-moment formulas in float32.

    Parameters
    ----------
    x : Tensor
        ``(B, C, H, W)`` floating tensor (any colour space or feature map).
    eps : float
        Relative degeneracy threshold: channels with ``std <= eps * (1 + |mean|)``
        get ``std = 0``, skewness 0 and excess kurtosis 0 (module docstring).

    Returns
    -------
    Moments
        ``(B, C)`` fields in ``x``'s dtype promoted to at least float32.
    """
    flat = _flat(x)
    mean = flat.mean(dim=-1)
    cen = flat - mean.unsqueeze(-1)
    c2 = cen * cen
    m2 = c2.mean(dim=-1)
    m3 = (c2 * cen).mean(dim=-1)
    m4 = (c2 * c2).mean(dim=-1)
    std = m2.sqrt()
    degenerate = std <= eps * (1.0 + mean.abs())
    safe_m2 = torch.where(degenerate, torch.ones_like(m2), m2)
    zero = torch.zeros_like(m2)
    skew = torch.where(degenerate, zero, m3 / safe_m2**1.5)
    kurt = torch.where(degenerate, zero, m4 / (safe_m2 * safe_m2) - 3.0)
    return Moments(mean, torch.where(degenerate, zero, std), skew, kurt)


def quantiles(x: Tensor, qs: tuple[float, ...]) -> Tensor:
    """Per-channel quantiles with linear interpolation (``numpy.quantile`` default).

    Parameters
    ----------
    x : Tensor
        ``(B, C, H, W)`` floating tensor.
    qs : tuple of float
        Probabilities in ``[0, 1]``.

    Returns
    -------
    Tensor
        ``(B, C, len(qs))``. One sort per channel; unlike ``torch.quantile`` there is
        no 16M-element input limit.
    """
    flat = _flat(x)
    n = flat.shape[-1]
    srt = flat.sort(dim=-1).values
    out = []
    for q in qs:
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile probabilities must be in [0, 1], got {q}")
        pos = q * (n - 1)
        lo = int(pos)
        hi = min(lo + 1, n - 1)
        frac = pos - lo
        out.append(srt[..., lo] + frac * (srt[..., hi] - srt[..., lo]))
    return torch.stack(out, dim=-1)


def _median_last(v: Tensor) -> Tensor:
    """Median along the last axis, averaging the two middle values when even.

    ``torch.median`` returns the lower middle value instead, which differs from
    ``numpy.median`` (and from the usual definition) for even window sizes.
    """
    n = v.shape[-1]
    srt = v.sort(dim=-1).values
    if n % 2:
        return srt[..., n // 2]
    return 0.5 * (srt[..., n // 2 - 1] + srt[..., n // 2])


def _windows(x: Tensor, window: int) -> Tensor:
    """Non-overlapping ``window x window`` tiles as ``(B, C, n_tiles, window**2)``.

    The window shrinks to the image side for images smaller than ``window``; rows
    and columns left over when ``H`` or ``W`` is not a multiple are dropped.
    """
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    b, c, h, w = x.shape
    wh, ww = min(window, h), min(window, w)
    nh, nw = h // wh, w // ww
    tiles = x[:, :, : nh * wh, : nw * ww].reshape(b, c, nh, wh, nw, ww)
    return tiles.permute(0, 1, 2, 4, 3, 5).reshape(b, c, nh * nw, wh * ww)


def windowed_median_abs_dev(x: Tensor, window: int = 8) -> tuple[Tensor, Tensor]:
    """Local mean and local MAD (Table V row 3), each ``(B, C)``.

    Local mean = mean over non-overlapping ``window x window`` tiles of each tile's
    mean; local MAD = mean over tiles of each tile's median absolute deviation
    ``median(|v - median(v)|)`` (unscaled, i.e. without the 1.4826 normal factor).
    """
    _flat(x)  # validation
    tiles = _windows(x.to(_work_dtype(x)), window)
    local_mean = tiles.mean(dim=-1).mean(dim=-1)
    med = _median_last(tiles)
    mad = _median_last((tiles - med.unsqueeze(-1)).abs())
    return local_mean, mad.mean(dim=-1)


def image_statistics(
    x: Tensor, kind: StatKind, *, window: int = 8, eps: float = 1e-6
) -> Tensor:
    """Per-image, per-channel statistics of ``kind``, shape ``(B, C, k)``.

    Parameters
    ----------
    x : Tensor
        ``(B, C, H, W)`` floating tensor, in whatever colour space the statistics
        are wanted.
    kind : str
        One of :data:`STAT_KINDS` (names of the ``k`` entries in :data:`STAT_NAMES`):

        * ``"moments"`` (k=4): mean, std, skewness, excess kurtosis
          (:func:`channel_moments`).
        * ``"mean_std"``: Table V row 1.
        * ``"quantile_cv"``: row 2, the 90 % quantile and the coefficient of
          variation ``std / mean`` (the paper's "compilation coefficient"). The mean
          in the denominator is floored at ``eps`` in magnitude (keeping its sign),
          so CV is finite but only meaningful for positive-valued channels (RGB,
          LAB ``L``, HED optical densities), not for LAB ``a``/``b``.
        * ``"local_mean_mad"``: row 3, see :func:`windowed_median_abs_dev`.
        * ``"mean_iqr"``: row 4, mean and ``q75 - q25``.
        * ``"skew_kurt"``: row 5 (FedStain's choice), skewness and excess kurtosis.
    window : int
        Tile side for ``"local_mean_mad"``.
    eps : float
        Degeneracy threshold of :func:`channel_moments` and the CV denominator floor.

    Returns
    -------
    Tensor
        ``(B, C, k)`` in ``x``'s dtype promoted to at least float32.
    """
    kind = check_kind(kind)
    if kind == "local_mean_mad":
        return torch.stack(windowed_median_abs_dev(x, window), dim=-1)
    if kind == "mean_iqr":
        q = quantiles(x, (0.25, 0.75))
        mean = _flat(x).mean(dim=-1)
        return torch.stack((mean, q[..., 1] - q[..., 0]), dim=-1)
    mom = channel_moments(x, eps)
    if kind == "moments":
        return mom.as_tensor()
    if kind == "mean_std":
        return torch.stack((mom.mean, mom.std), dim=-1)
    if kind == "skew_kurt":
        return torch.stack((mom.skewness, mom.kurtosis), dim=-1)
    # quantile_cv
    q90 = quantiles(x, (0.9,))[..., 0]
    return torch.stack((q90, mom.std / signed_floor(mom.mean, eps)), dim=-1)


def signed_floor(v: Tensor, eps: float) -> Tensor:
    """``v`` with magnitude floored at ``eps``, keeping its sign (0 maps to +eps)."""
    sign = torch.where(v < 0, -torch.ones_like(v), torch.ones_like(v))
    return sign * v.abs().clamp_min(eps)
