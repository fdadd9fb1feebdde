"""Input checks and shared numerics of the losses (fedpath.losses._common)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedpath.losses._common import (
    _check_labels,
    _check_non_negative,
    _check_pair,
    _check_positive,
    _check_reduction,
    _check_tensor,
    _cosine,
    _normalize,
    _positive_terms,
    _reduce,
    _stack_view_major,
)


def test_checks_accept_good_input_and_name_the_bad() -> None:
    x = torch.zeros(3, 2)
    assert _check_tensor("z", x, (2, 3)) is x
    with pytest.raises(TypeError, match="z must be a torch.Tensor, got list"):
        _check_tensor("z", [1.0], (2,))
    with pytest.raises(
        ValueError, match="floating-point tensor, got dtype torch.int64"
    ):
        _check_tensor("z", torch.zeros(3, 2, dtype=torch.long), (2,))
    with pytest.raises(ValueError, match=r"z must be 2-D or 3-D, got shape \(3,\)"):
        _check_tensor("z", torch.zeros(3), (2, 3))
    _check_pair("a", x, "b", torch.ones(3, 2))
    with pytest.raises(ValueError, match=r"b must have the shape of a \(3, 2\)"):
        _check_pair("a", x, "b", torch.ones(2, 2))
    labels = torch.tensor([0, 1, 1])
    assert _check_labels("y", labels, 3, "sample") is labels
    with pytest.raises(
        ValueError, match=r"y must have shape \(4,\) \(one label per im"
    ):
        _check_labels("y", labels, 4, "image")
    with pytest.raises(TypeError, match="y must be a torch.Tensor"):
        _check_labels("y", [0, 1], 2, "image")


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_positive_numbers(bad: float) -> None:
    assert _check_positive("t", 0.5) == 0.5
    with pytest.raises(ValueError, match="t must be a finite number > 0"):
        _check_positive("t", bad)


def test_non_negative_numbers_and_reductions() -> None:
    assert _check_non_negative("w", 0) == 0.0
    for bad in (-1e-9, math.inf, math.nan):
        with pytest.raises(ValueError, match="w must be a finite number >= 0"):
            _check_non_negative("w", bad)
    _check_reduction("sum", ("mean", "sum"))
    with pytest.raises(ValueError, match=r"reduction must be one of \('mean',\)"):
        _check_reduction("none", ("mean",))
    v = torch.tensor([1.0, 2.0, 6.0])
    assert _reduce(v, "mean") == 3.0 and _reduce(v, "sum") == 9.0
    assert _reduce(v, "none") is v


def test_normalize_and_cosine_against_numpy() -> None:
    a = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, -1.0]])
    b = np.array([[4.0, 3.0], [1.0, 2.0], [-2.0, 2.0]])
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    np.testing.assert_allclose(_normalize(ta)[0].numpy(), [0.6, 0.8])
    assert torch.equal(_normalize(ta)[1], torch.zeros(2))  # zero stays zero
    expected = [24 / 25, 0.0, -1.0]  # a . b / (|a| |b|), 0 for a zero vector
    np.testing.assert_allclose(_cosine(ta, tb).numpy(), expected, atol=1e-12)
    z = torch.zeros(2, 3, requires_grad=True)
    (grad,) = torch.autograd.grad(_normalize(z).sum(), z)
    assert torch.isfinite(grad).all()


def test_stack_view_major_order() -> None:
    f = torch.arange(2 * 3 * 1.0).reshape(2, 3, 1)  # sample b, view v -> 3 b + v
    out = _stack_view_major(f)
    # anchor v * B + b is view v of sample b
    assert out.flatten().tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]


def test_positive_terms_against_a_loop() -> None:
    sim = torch.randn(
        5, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    y = [0, 1, 0, 0, 2]
    same = torch.tensor([[a == b for b in y] for a in y])
    sum_pos, lse, n_pos = _positive_terms(sim, same)
    for i in range(5):
        others = [j for j in range(5) if j != i]
        pos = [j for j in others if y[j] == y[i]]
        assert sum_pos[i].item() == pytest.approx(sum(sim[i, j].item() for j in pos))
        ref = math.log(sum(math.exp(sim[i, j].item()) for j in others))
        assert lse[i].item() == pytest.approx(ref, rel=1e-12)
        assert n_pos[i].item() == len(pos)
    assert n_pos.dtype == torch.float64
