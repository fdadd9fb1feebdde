"""FedProx's proximal term (fedpath.losses.proximal) against a loop."""

from __future__ import annotations

import pytest
import torch

from fedpath.losses.proximal import (
    proximal_term,
    snapshot_parameters,
)
from tests.losses.references import SEEDS, as_rows, gen


def _params(seed: int) -> list[torch.Tensor]:
    shapes = [(4, 3), (3,), (2, 2, 2), (1,), (5,)]
    return [torch.randn(s, generator=gen(seed + i)) for i, s in enumerate(shapes)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mu", [0.0, 0.01, 1.0])
def test_proximal_term_matches_loop_and_gradient(seed: int, mu: float) -> None:
    anchor = _params(seed)
    params = [
        (a + 0.3 * torch.randn(a.shape, generator=gen(99 + seed))) for a in anchor
    ]
    params = [p.requires_grad_(True) for p in params]
    prox = proximal_term(params, anchor, mu)
    # Li et al. 2020, Eq. 2: (mu / 2) * sum over every entry of (w - w_g)^2
    ref = sum(
        (x - y) ** 2
        for p, a in zip(params, anchor, strict=True)
        for x, y in zip(
            as_rows(p.flatten()[None])[0], as_rows(a.flatten()[None])[0], strict=True
        )
    )
    assert float(prox.distance.detach()) == pytest.approx(ref, rel=1e-6)
    assert float(prox.penalty.detach()) == pytest.approx(
        0.5 * mu * ref, rel=1e-6, abs=1e-12
    )
    grads = torch.autograd.grad(prox.penalty, params)
    for g, p, a in zip(grads, params, anchor, strict=True):
        torch.testing.assert_close(g, mu * (p.detach() - a))
    stacked = proximal_term(params, anchor, mu, stacked=True)
    assert float(stacked.distance.detach()) == pytest.approx(ref, rel=1e-6)
    # the two summation orders are exactly those the methods used inline before
    inline = torch.as_tensor(
        sum(((p - a) ** 2).sum() for p, a in zip(params, anchor, strict=True))
    )
    assert torch.equal(prox.distance, inline)
    assert torch.equal(
        stacked.distance,
        torch.stack(
            [((p - a) ** 2).sum() for p, a in zip(params, anchor, strict=True)]
        ).sum(),
    )
    assert torch.equal(prox.penalty, 0.5 * mu * inline)


def test_proximal_term_zero_at_the_anchor_and_snapshot_is_detached() -> None:
    model = torch.nn.Linear(3, 2)
    anchor = snapshot_parameters(model.parameters())
    assert all(not a.requires_grad for a in anchor)

    def prox() -> tuple[float, float]:
        p, d = proximal_term(model.parameters(), anchor, 0.5)
        return float(p.detach()), float(d.detach())

    assert prox() == (0.0, 0.0)
    with torch.no_grad():
        model.weight.add_(1.0)  # a copy: the anchor keeps the round's weights
    assert prox() == (1.5, 6.0)  # 6 weights moved by 1; (0.5 / 2) * 6
    with pytest.raises(ValueError):
        proximal_term(model.parameters(), anchor[:1], 0.5)
