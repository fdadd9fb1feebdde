"""Input checks and small numerics shared by the losses."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

NORM_EPS = 1e-12


# --------------------------------------------------------------------------- checks
def _check_tensor(name: str, x: object, dims: tuple[int, ...]) -> Tensor:
    """``x`` as a floating-point tensor whose number of dimensions is in ``dims``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() not in dims:
        want = " or ".join(f"{d}-D" for d in dims)
        raise ValueError(f"{name} must be {want}, got shape {tuple(x.shape)}")
    return x


def _check_same_shape(name: str, x: Tensor, ref_name: str, ref: Tensor) -> None:
    if x.shape != ref.shape:
        raise ValueError(
            f"{name} must have the shape of {ref_name} {tuple(ref.shape)}, "
            f"got {tuple(x.shape)}"
        )


def _check_pair(
    ref_name: str, ref: object, name: str, x: object, dims: tuple[int, ...] = (2,)
) -> None:
    """Both floating tensors with a number of dimensions in ``dims``, ``x`` shaped
    like ``ref``: the two feature sets that every pairwise loss here compares."""
    r = _check_tensor(ref_name, ref, dims)
    _check_same_shape(name, _check_tensor(name, x, dims), ref_name, r)


def _check_labels(name: str, labels: object, n: int, what: str) -> Tensor:
    """``labels`` as a 1-D tensor of length ``n`` (``what`` says what ``n`` counts)."""
    if not isinstance(labels, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(labels).__name__}")
    if labels.dim() != 1 or labels.shape[0] != n:
        raise ValueError(
            f"{name} must have shape ({n},) (one label per {what}), "
            f"got {tuple(labels.shape)}"
        )
    return labels


def _check_positive(name: str, value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _check_non_negative(name: str, value: float) -> float:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _check_reduction(reduction: str, allowed: tuple[str, ...]) -> None:
    if reduction not in allowed:
        raise ValueError(f"reduction must be one of {allowed}, got {reduction!r}")


def _normalize(x: Tensor) -> Tensor:
    """L2-normalise along the last axis (zero vectors stay zero, gradient finite)."""
    return F.normalize(x, p=2.0, dim=-1, eps=NORM_EPS)


def _cosine(a: Tensor, b: Tensor) -> Tensor:
    """Cosine similarity along the last axis; 0 when either vector is zero."""
    return (_normalize(a) * _normalize(b)).sum(dim=-1)


def _reduce(values: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return values.mean()
    if reduction == "sum":
        return values.sum()
    return values


def _stack_view_major(features: Tensor) -> Tensor:
    """``(B, V, D)`` -> ``(V * B, D)``: view 0 of every sample, then view 1, ..."""
    b, v, d = features.shape
    return features.transpose(0, 1).reshape(v * b, d)


def _positive_terms(sim: Tensor, same: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""Per-anchor pieces of SupCon-type losses from the scaled similarity matrix.

    Parameters
    ----------
    sim : Tensor
        ``(N, N)`` similarities already divided by the temperature.
    same : Tensor
        ``(N, N)`` boolean, ``same[i, j]`` iff anchors ``i`` and ``j`` share a label
        (the diagonal is ignored).

    Returns
    -------
    sum_pos, lse, n_pos : Tensor
        ``(N,)`` each: :math:`\sum_{p \in P(i)} s_{ip}`, the log-sum-exp
        :math:`\log \sum_{a \in A(i)} e^{s_{ia}}` and :math:`|P(i)|` (as
        ``sim.dtype``), with :math:`A(i) = \{a \ne i\}` and
        :math:`P(i) = \{p \in A(i) : y_p = y_i\}`.
    """
    n = sim.shape[0]
    eye = torch.eye(n, dtype=torch.bool, device=sim.device)
    # Self is excluded from A(i) by a -inf entry; logsumexp subtracts the row maximum
    # internally, which is the stable form of the reference code's max-subtraction.
    lse = torch.logsumexp(sim.masked_fill(eye, float("-inf")), dim=1)
    pos = same & ~eye
    sum_pos = torch.where(pos, sim, torch.zeros_like(sim)).sum(dim=1)
    return sum_pos, lse, pos.sum(dim=1).to(sim.dtype)
