"""Several versions of one batch through the network as a single batch.

FedStain (Algorithm 2, lines 14-18), FedCCRL and FedAlign compare the features and
predictions of a batch ``X`` with those of augmented versions of it. All versions
go through the encoder and the classifier together, as one ``(M * B)`` batch: one
pass instead of ``M``, with the same result up to BatchNorm's batch statistics,
which then cover every version (as in the released FedCCRL/FedAlign code).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import nn


class ViewOutputs(NamedTuple):
    """Features and logits of ``M`` versions of a batch of ``B`` images.

    ``features`` ``(M * B, D)`` and ``logits`` ``(M * B, C)`` are version-major
    (all of version 0, then version 1, ...); ``zs`` and ``ls`` are the same split
    into ``M`` tensors of ``B`` rows, in the order the versions were given.
    """

    features: torch.Tensor
    logits: torch.Tensor
    zs: tuple[torch.Tensor, ...]
    ls: tuple[torch.Tensor, ...]


def forward_views(model: nn.Module, views: Sequence[torch.Tensor]) -> ViewOutputs:
    """``h`` and ``g`` of a :class:`~fedpath.models.backbones.FedModel` on the
    concatenated ``views`` (each ``(B, 3, H, W)``, the original first)."""
    b = views[0].shape[0]
    z = model.encode(torch.cat(list(views)))  # type: ignore[operator]
    logits = model.classifier(z)  # type: ignore[operator]
    return ViewOutputs(z, logits, z.split(b), logits.split(b))
