"""Jensen-Shannon and generalized cross-entropy (fedpath.losses.prediction),
against slow loops over their formulas."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from fedpath.losses.prediction import (
    generalized_cross_entropy,
    js_divergence,
    weighted_cross_entropy,
)
from tests.losses.references import (
    D64,
    SEEDS,
    approx,
    as_rows,
    check_errors,
    check_gradients,
    gen,
    ref_gce,
    ref_js,
)


# ----------------------------------------------------------------------------- JS
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("m", [2, 3, 4])
def test_js_matches_loop(seed: int, m: int) -> None:
    g = gen(seed)
    logits = [torch.randn(5, 4, generator=g, dtype=D64) * 3 for _ in range(m)]
    approx(js_divergence(logits), ref_js([as_rows(lg) for lg in logits]), rel=1e-9)


def test_js_properties() -> None:
    g = gen(11)
    a = torch.randn(6, 5, generator=g, dtype=D64)
    b = torch.randn(6, 5, generator=g, dtype=D64)
    c = torch.randn(6, 5, generator=g, dtype=D64)
    assert js_divergence([a, a, a]).item() == pytest.approx(0.0, abs=1e-12)
    assert js_divergence([a, a + 7.0]).item() == pytest.approx(0.0, abs=1e-12)
    assert torch.allclose(js_divergence([a, b, c]), js_divergence([c, a, b]))
    assert torch.allclose(js_divergence([a, b]), js_divergence([b, a]))
    assert js_divergence([a, b, c]).item() >= 0
    # two-distribution JS is the classic 0.5 KL(p||m) + 0.5 KL(q||m)
    p, q = a.softmax(1), b.softmax(1)
    m = (p + q) / 2
    classic = 0.5 * (p * (p / m).log()).sum(1) + 0.5 * (q * (q / m).log()).sum(1)
    assert js_divergence([a, b]).item() == pytest.approx(
        classic.mean().item(), rel=1e-10
    )
    # bounded by log M (natural log), approached by disjoint one-hot predictions
    for m_count in (2, 3, 5):
        one_hot = [torch.full((2, m_count), -1e4, dtype=D64) for _ in range(m_count)]
        for k, lg in enumerate(one_hot):
            lg[:, k] = 0.0
        js = js_divergence(one_hot).item()
        assert js <= math.log(m_count) + 1e-9
        assert js == pytest.approx(math.log(m_count), rel=1e-6)
        rand = [torch.randn(4, m_count, generator=g) * 20 for _ in range(m_count)]
        assert js_divergence(rand).item() <= math.log(m_count) + 1e-6


def test_js_matches_torch_kl_div_batchmean_formulation() -> None:
    g = gen(2)
    logits = [torch.randn(7, 3, generator=g) for _ in range(3)]
    probs = [lg.softmax(1) for lg in logits]
    zero = torch.zeros(())
    log_m = torch.clamp(sum(probs, zero) / 3, 1e-7, 1).log()
    expected = sum((F.kl_div(log_m, p, reduction="batchmean") for p in probs), zero) / 3
    assert torch.allclose(js_divergence(logits), expected, atol=1e-6)


# ---------------------------------------------------------------------------- GCE
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("q", [0.1, 0.5, 0.7, 1.0])
def test_gce_matches_loop(seed: int, q: float) -> None:
    g = gen(seed)
    logits = torch.randn(6, 4, generator=g, dtype=D64) * 2
    targets = torch.randint(0, 4, (6,), generator=g)
    ref = ref_gce(as_rows(logits), targets.tolist(), q)
    approx(generalized_cross_entropy(logits, targets, q), sum(ref) / 6)
    approx(generalized_cross_entropy(logits, targets, q, reduction="sum"), sum(ref))
    none = generalized_cross_entropy(logits, targets, q, reduction="none")
    assert none.shape == (6,)
    assert torch.allclose(none, torch.tensor(ref, dtype=D64), rtol=1e-10)


def test_gce_limits() -> None:
    g = gen(4)
    logits = torch.randn(8, 5, generator=g, dtype=D64) * 3
    targets = torch.randint(0, 5, (8,), generator=g)
    ce = F.cross_entropy(logits, targets)
    for q in (1e-3, 1e-6, 1e-9):
        gce = generalized_cross_entropy(logits, targets, q)
        assert gce.item() == pytest.approx(ce.item(), rel=2 * q * 50 + 1e-12)
    assert generalized_cross_entropy(logits, targets, 1e-9).item() == pytest.approx(
        ce.item(), rel=1e-7
    )
    p_y = logits.softmax(1).gather(1, targets[:, None]).squeeze(1)
    assert torch.allclose(
        generalized_cross_entropy(logits, targets, 1.0), (1 - p_y).mean()
    )
    # monotone in q towards CE from below (p^q >= 1 + q log p)
    vals = [
        generalized_cross_entropy(logits, targets, q).item() for q in (1.0, 0.7, 0.3)
    ]
    assert vals[0] < vals[1] < vals[2] < ce.item()


def test_gce_saturated_logits() -> None:
    logits = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 0.0]], requires_grad=True)
    targets = torch.tensor([1, 1])
    loss = generalized_cross_entropy(logits, targets, 0.7)
    loss.backward()
    assert loss.item() == pytest.approx(0.5 / 0.7, rel=1e-6)
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


def _loss_cases() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    return {
        "js": lambda x: js_divergence([x[:4], x[4:]]),
        "gce": lambda x: generalized_cross_entropy(x, torch.tensor([0, 1, 2, 0] * 2)),
    }


@pytest.mark.parametrize("name", list(_loss_cases()))
def test_gradients_finite_and_correct(name: str) -> None:
    check_gradients(_loss_cases()[name])


def test_bad_inputs_raise() -> None:
    x2 = torch.randn(4, 3)
    x3 = torch.randn(4, 2, 3)
    lab = torch.tensor([0, 1, 0, 1])
    check_errors(
        [
            (lambda: js_divergence([x2]), ValueError, "at least 2"),
            (lambda: js_divergence(x2), TypeError, "sequence"),  # type: ignore[arg-type]
            (
                lambda: js_divergence([x2, torch.randn(4, 4)]),
                ValueError,
                r"logits\[1\]",
            ),
            (lambda: js_divergence([x2, x2], eps=0.0), ValueError, "eps"),
            (lambda: generalized_cross_entropy(x2, lab, q=0.0), ValueError, "q"),
            (lambda: generalized_cross_entropy(x2, lab, q=1.5), ValueError, "q"),
            (lambda: generalized_cross_entropy(x2, lab.float()), ValueError, "targets"),
            (lambda: generalized_cross_entropy(x2, lab + 5), ValueError, "targets"),
            (lambda: generalized_cross_entropy(x2, lab[:2]), ValueError, "targets"),
            (lambda: generalized_cross_entropy(x3, lab), ValueError, "logits"),
            (
                lambda: generalized_cross_entropy(x2, lab, reduction="x"),  # type: ignore[arg-type]
                ValueError,
                "red",
            ),
        ]
    )


def test_weighted_cross_entropy_against_a_loop() -> None:
    logits = torch.randn(5, 3, generator=gen(3), dtype=D64)
    y = torch.tensor([0, 2, 2, 1, 0])
    w = torch.tensor([0.5, 2.0, 1.5], dtype=D64)
    rows = as_rows(logits)
    nll = [
        -(r[t] - math.log(sum(math.exp(v) for v in r)))
        for r, t in zip(rows, y.tolist(), strict=True)
    ]
    # the mean of w_y * nll over the batch, not divided by the sum of weights
    ref = sum(float(w[t]) * n for t, n in zip(y.tolist(), nll, strict=True)) / 5
    approx(weighted_cross_entropy(logits, y, w), ref)
    approx(weighted_cross_entropy(logits, y), sum(nll) / 5)
    one = weighted_cross_entropy(logits[:1], y[:1], w)
    approx(one, 0.5 * nll[0])  # a batch of one keeps its weight
    with pytest.raises(ValueError, match=r"weight must have shape \(3,\)"):
        weighted_cross_entropy(logits, y, torch.ones(2))
