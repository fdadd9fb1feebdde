"""Test-time augmentation of image batches: the views a prediction averages over.

Here, below both the image task (:func:`fedpath.tasks.images.predict_probs`) and
the model file (:meth:`fedpath.artifact.LoadedModel.predict_proba`), so the two
average over the same views without importing each other.
"""

from __future__ import annotations

import torch


def dihedral_views(x: torch.Tensor) -> list[torch.Tensor]:
    """The 8 flips and 90-degree turns of images ``x`` (B, C, H, W), identity
    first."""
    turns = [torch.rot90(x, k, dims=(2, 3)) for k in range(4)]
    return turns + [t.flip(3) for t in turns]
