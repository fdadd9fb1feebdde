"""Soft labels from annotator agreement: :mod:`fedpath.losses.soft_targets`."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedpath.losses import soft_targets
from fedpath.losses.soft_targets import from_agreement, mixup, soft_cross_entropy


def test_agreement_puts_its_share_on_the_label_and_spreads_the_rest() -> None:
    got = from_agreement(np.array([0, 1, 2]), np.array([1.0, 2 / 3, 0.5]), 3)
    want = [[1.0, 0.0, 0.0], [1 / 6, 2 / 3, 1 / 6], [0.25, 0.25, 0.5]]
    np.testing.assert_allclose(got, want, atol=1e-7)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.sum(1), 1.0, atol=1e-6)
    two = from_agreement(np.array([1, 0]), np.array([2 / 3, 2 / 3]), 2)
    np.testing.assert_allclose(two, [[1 / 3, 2 / 3], [2 / 3, 1 / 3]], atol=1e-7)


@pytest.mark.parametrize("weighted", [False, True])
def test_one_hot_targets_give_pytorchs_weighted_cross_entropy(weighted: bool) -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 3, generator=g) * 3
    y = torch.tensor([0, 1, 2, 2, 1, 0, 2])
    w = torch.tensor([0.5, 2.0, 1.5]) if weighted else None
    hard = F.cross_entropy(logits, y, weight=w)
    soft = soft_cross_entropy(logits, F.one_hot(y, 3).float(), w)
    torch.testing.assert_close(soft, hard)


def test_soft_targets_follow_the_formula() -> None:
    logits = torch.tensor([[2.0, -1.0], [0.5, 0.5]])
    t = torch.tensor([[2 / 3, 1 / 3], [0.0, 1.0]])
    w = torch.tensor([1.0, 3.0])
    logp = F.log_softmax(logits, 1)
    want = -(t * w * logp).sum() / (t * w).sum()
    torch.testing.assert_close(soft_cross_entropy(logits, t, w), want)
    # a split vote pulls the optimum away from certainty: the loss of a 2/3 target
    # is lowest at p = 2/3, not at p -> 1
    z = torch.linspace(-4, 4, 801)
    losses = [
        float(soft_cross_entropy(torch.tensor([[0.0, v]]), t[:1].flip(1))) for v in z
    ]
    best = float(torch.sigmoid(z[int(np.argmin(losses))]))
    assert best == pytest.approx(2 / 3, abs=0.01)


def test_using_sets_the_batchs_targets_only_inside_the_block() -> None:
    t = torch.ones(2, 2) / 2
    assert soft_targets.current() is None
    with soft_targets.using(t):
        assert soft_targets.current() is t
        with soft_targets.using(None):
            assert soft_targets.current() is None
        assert soft_targets.current() is t
    assert soft_targets.current() is None


def test_mixup_combines_inputs_and_targets_with_the_same_weight() -> None:
    x = torch.arange(12.0).reshape(3, 4)
    t = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2 / 3, 1 / 3]])
    perm = torch.tensor([2, 0, 1])
    mx, mt = mixup(x, t, 0.7, perm)
    torch.testing.assert_close(mx[0], 0.7 * x[0] + 0.3 * x[2])
    torch.testing.assert_close(mt[1], 0.7 * t[1] + 0.3 * t[0])
    torch.testing.assert_close(mt.sum(1), torch.ones(3))  # still distributions
    same = mixup(x, t, 1.0, perm)
    torch.testing.assert_close(same[0], x) and torch.testing.assert_close(same[1], t)
