"""The views test-time augmentation averages over (:mod:`fedpath.models.tta`)."""

from __future__ import annotations

import torch

from fedpath.models.tta import dihedral_views


def test_dihedral_views_are_the_eight_distinct_symmetries() -> None:
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    views = dihedral_views(x)
    assert len(views) == 8 and torch.equal(views[0], x)
    assert len({tuple(v.flatten().tolist()) for v in views}) == 8
    # closed under a quarter turn: turning the input permutes the views
    turned = {
        tuple(v.flatten().tolist()) for v in dihedral_views(torch.rot90(x, 1, (2, 3)))
    }
    assert turned == {tuple(v.flatten().tolist()) for v in views}
