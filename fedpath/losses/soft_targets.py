"""Soft targets: labels from annotator agreement (``train.soft_labels:
agreement``) and MixUp (``train.mixup``).

Experts disagree on some figures: in AMi-Br three pathologists vote on every
mitotic figure and one atypical figure in two is a 2-of-3 call. A dataset can
carry, per sample, the share of annotators who agree with its label
(``data.params.agreement``: a manifest column, :mod:`fedpath.data.manifest`);
the sample's target is then that share on its label and the rest spread evenly
over the other classes (:func:`from_agreement`; with two classes and three
voters, 2/3 vs 1/3 for a split vote, one-hot for a unanimous one).

The local loop (:func:`fedpath.tasks.images.fit_images`) hands each batch's
targets to the classification loss through :func:`using`;
:meth:`fedpath.algorithms.base.ClientContext.cross_entropy` (the loss of every
supervised method) then computes :func:`soft_cross_entropy` instead of the hard
one. Evaluation and model selection keep the dataset's labels.

MixUp (Zhang et al., ICLR 2018) trains on convex combinations of pairs of
inputs and of their targets (:func:`mixup`); the loop draws the weight from
Beta(alpha, alpha) and the partners as a permutation of the batch. On the
frozen-feature fast path (``train.cache_features``) the inputs mixed are the
cached maps of the frozen stages (a manifold MixUp at that cut).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import torch
import torch.nn.functional as F

_CURRENT: ContextVar[torch.Tensor | None] = ContextVar("soft_targets", default=None)


@contextmanager
def using(targets: torch.Tensor | None) -> Iterator[None]:
    """Within the block, :func:`current` is ``targets`` (B, C) (None: hard labels)."""
    token = _CURRENT.set(targets)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> torch.Tensor | None:
    """The target distributions of the batch being trained on, if any."""
    return _CURRENT.get()


def from_agreement(
    labels: np.ndarray, agreement: np.ndarray, num_classes: int
) -> np.ndarray:
    """(N, C) float32 targets: ``agreement[i]`` on ``labels[i]``, the rest spread
    evenly over the other classes (one class: all on it)."""
    n = len(labels)
    share = np.asarray(agreement, dtype=np.float64)
    rest = (1.0 - share) / max(num_classes - 1, 1)
    out = np.repeat(rest[:, None], num_classes, axis=1)
    out[np.arange(n), np.asarray(labels, dtype=np.int64)] = share
    if num_classes == 1:
        out[:] = 1.0
    return out.astype(np.float32)


def soft_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """``sum_i sum_c w_c t_ic (-log softmax(z_i)_c) / sum_i sum_c w_c t_ic``.

    With one-hot targets this is PyTorch's class-weighted cross-entropy (the
    weighted mean over the batch), so unanimous labels train exactly as hard
    ones do; ``weight``: per-class weights (``train.class_weights``)."""
    w = targets if weight is None else targets * weight.to(targets)
    return -(w * F.log_softmax(logits, 1)).sum() / w.sum().clamp_min(1e-12)


def mixup(
    x: torch.Tensor, targets: torch.Tensor, lam: float, perm: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``lam * a + (1 - lam) * a[perm]`` of the inputs ``x`` and of their target
    distributions ``targets`` (B, C)."""
    mix_x = lam * x + (1.0 - lam) * x[perm]
    return mix_x, lam * targets + (1.0 - lam) * targets[perm]
