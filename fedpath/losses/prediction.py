"""Prediction-level losses: Jensen-Shannon alignment and generalized cross-entropy.

See :mod:`fedpath.losses` for the conventions and references.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from fedpath.losses._common import (
    _check_labels,
    _check_reduction,
    _check_same_shape,
    _check_tensor,
    _reduce,
)


# ------------------------------------------------------------- prediction alignment
def js_divergence(logits: Sequence[Tensor], eps: float = 1e-7) -> Tensor:
    r"""Generalised Jensen-Shannon divergence of ``M`` predictions (FedStain Eq. 5).

    .. math::

        L_{JS} = \frac{1}{M} \sum_{i=1}^{M} D_{KL}(p_i \,\|\, m), \qquad
        p_i = \operatorname{softmax}(\ell_i), \quad
        m = \operatorname{clamp}\Big(\frac{1}{M} \sum_i p_i, \epsilon, 1\Big)

    as in AugMix and the FedCCRL code (``F.kl_div(m.log(), p_i, "batchmean")``): the
    KL is summed over classes and averaged over the batch. It is 0 for identical
    predictions, symmetric in its arguments and at most :math:`\log M` (natural
    log) up to the clamp.

    Parameters
    ----------
    logits : sequence of Tensor
        ``M >= 2`` tensors of shape ``(B, C)`` (unnormalised scores of the ``M``
        versions of one batch, e.g. original + two augmentations).
    eps : float
        Lower clamp on the mixture, in ``(0, 1)``.

    Returns
    -------
    Tensor
        Scalar loss.
    """
    if isinstance(logits, Tensor) or not isinstance(logits, Sequence):
        raise TypeError("logits must be a sequence (list/tuple) of tensors")
    if len(logits) < 2:
        raise ValueError(f"logits must hold at least 2 tensors, got {len(logits)}")
    if not (math.isfinite(eps) and 0 < eps < 1):
        raise ValueError(f"eps must be in (0, 1), got {eps!r}")
    first = _check_tensor("logits[0]", logits[0], (2,))
    for k, lg in enumerate(logits[1:], start=1):
        _check_tensor(f"logits[{k}]", lg, (2,))
        _check_same_shape(f"logits[{k}]", lg, "logits[0]", first)
    if first.shape[0] < 1:
        raise ValueError("logits must hold at least one sample (B >= 1), got B=0")
    log_p = torch.stack([F.log_softmax(lg, dim=1) for lg in logits])  # (M, B, C)
    p = log_p.exp()
    log_m = p.mean(dim=0).clamp(min=eps, max=1.0).log()
    # p * (log p - log m); log_softmax keeps log p finite, and p underflowing to 0
    # gives 0 (torch's kl_div uses xlogy for the same reason).
    kl = (p * (log_p - log_m.unsqueeze(0))).sum(dim=2)  # (M, B)
    return kl.mean()


def generalized_cross_entropy(
    logits: Tensor,
    targets: Tensor,
    q: float = 0.7,
    reduction: Literal["mean", "sum", "none"] = "mean",
) -> Tensor:
    r"""Generalised cross-entropy :math:`L_q` of [GCE]_ (Zhang & Sabuncu 2018, Eq. 6).

    .. math:: L_q(p, y) = \frac{1 - p_y^{q}}{q}, \qquad q \in (0, 1]

    computed as ``-expm1(q * log_softmax(logits)[y]) / q``, which is stable for
    tiny ``q`` and saturated logits. ``q -> 0`` recovers cross-entropy
    :math:`-\log p_y`; ``q = 1`` gives the MAE-like :math:`1 - p_y`. The paper's
    default is ``q = 0.7``.

    Parameters
    ----------
    logits : Tensor
        ``(B, C)`` unnormalised class scores.
    targets : Tensor
        ``(B,)`` integer class indices in ``[0, C)``.
    q : float
        Exponent in ``(0, 1]``.
    reduction : {"mean", "sum", "none"}
        Over the batch; ``"none"`` returns the ``(B,)`` per-sample losses.

    Returns
    -------
    Tensor
        Scalar loss, or ``(B,)`` with ``reduction="none"``.
    """
    _check_tensor("logits", logits, (2,))
    if not isinstance(targets, Tensor):
        raise TypeError(f"targets must be a torch.Tensor, got {type(targets).__name__}")
    if (
        targets.is_floating_point()
        or targets.is_complex()
        or targets.dtype == torch.bool
    ):
        raise ValueError(
            f"targets must hold integer class indices, got {targets.dtype}"
        )
    b, c = logits.shape
    _check_labels("targets", targets, b, "row of logits")
    if not (math.isfinite(q) and 0 < q <= 1):
        raise ValueError(f"q must be in (0, 1], got {q!r}")
    _check_reduction(reduction, ("mean", "sum", "none"))
    if b and (int(targets.min()) < 0 or int(targets.max()) >= c):
        raise ValueError(f"targets must lie in [0, {c}), got values outside")
    log_py = F.log_softmax(logits, dim=1).gather(1, targets.long().view(-1, 1))
    per_sample = -torch.expm1(q * log_py.squeeze(1)) / q
    return _reduce(per_sample, reduction)


def weighted_cross_entropy(
    logits: Tensor, targets: Tensor, weight: Tensor | None = None
) -> Tensor:
    r"""Cross-entropy with each sample weighted by its class's weight, averaged
    over the batch:

    .. math:: L = \frac{1}{B} \sum_{i=1}^{B} w_{y_i} \, (-\log p_{y_i})

    Unlike ``F.cross_entropy(..., weight=w)``, which divides by
    :math:`\sum_i w_{y_i}`, the weight survives a batch of one: a MIL step sees
    one slide, and there the weighted mean would be the plain loss again. With
    balanced weights :math:`w_c = n / (C n_c)` the expected weight of a training
    sample is 1, so the loss keeps its scale. ``weight=None``: plain mean
    cross-entropy.
    """
    _check_tensor("logits", logits, (2,))
    _check_labels("targets", targets, logits.shape[0], "row of logits")
    per_sample = F.cross_entropy(logits, targets, reduction="none")
    if weight is None:
        return per_sample.mean()
    if weight.dim() != 1 or weight.shape[0] != logits.shape[1]:
        raise ValueError(
            f"weight must have shape ({logits.shape[1]},) (one per class), "
            f"got {tuple(weight.shape)}"
        )
    return (weight.to(per_sample)[targets] * per_sample).mean()
