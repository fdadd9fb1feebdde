"""Predictions of a MIL model on slide bags (training: :mod:`fedpath.tasks.bags`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from fedpath.mil.bags import SlideBag
from fedpath.mil.models import MILModel


@torch.no_grad()
def evaluate_mil(
    model: MILModel, bags: Sequence[SlideBag]
) -> tuple[np.ndarray, np.ndarray]:
    """Class probabilities ``(n, C)`` and labels ``(n,)`` of ``bags`` (eval mode).

    Feed them to :func:`fedpath.evaluation.metrics.classification_metrics`.
    The model's train/eval mode is restored afterwards.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    probs: list[Tensor] = [
        torch.softmax(model(b.features.to(device)).logits, dim=1)[0].cpu() for b in bags
    ]
    model.train(was_training)
    labels = np.array([b.label for b in bags], dtype=np.int64)
    if not probs:
        return np.zeros((0, model.num_classes)), labels
    return torch.stack(probs).double().numpy(), labels
