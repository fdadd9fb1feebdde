"""SupCon, paired SupCon and FedCCRL's contrastive term (fedpath.losses.supervised),
each against a slow loop over its formula."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from fedpath.losses.supervised import (
    fedccrl_contrastive,
    paired_supcon,
    supcon_loss,
)
from tests.losses.references import (
    D64,
    LABEL_PATTERNS_B6,
    SEEDS,
    approx,
    as_rows,
    check_errors,
    check_gradients,
    gen,
    ref_fedccrl,
    ref_lse,
    ref_supcon_anchors,
)


# ------------------------------------------------------------------------- SupCon
def test_supcon_reference_cross_check_from_notes() -> None:
    f = torch.tensor(
        [[[1, 0], [0.6, 0.8]], [[0, 1], [0.8, 0.6]], [[-1, 0], [-0.6, -0.8]]],
        dtype=D64,
    )
    y = torch.tensor([0, 0, 1])
    assert supcon_loss(f, y, temperature=0.07).item() == pytest.approx(
        2.465398, abs=1e-6
    )
    assert supcon_loss(
        f, y, temperature=0.1, base_temperature=0.07
    ).item() == pytest.approx(2.572221, abs=1e-6)
    # base_temperature equal to temperature is the same as None
    assert torch.allclose(
        supcon_loss(f, y, 0.07, 0.07), supcon_loss(f, y, 0.07, None), atol=0
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("pattern", list(LABEL_PATTERNS_B6))
@pytest.mark.parametrize("views", [1, 2, 3])
def test_supcon_matches_loop(seed: int, pattern: str, views: int) -> None:
    g = gen(seed)
    labels = torch.tensor(LABEL_PATTERNS_B6[pattern])
    t, t_base = [(0.1, None), (0.07, 0.07), (0.2, 0.07), (0.5, 1.0)][seed]
    if views == 1:  # 2-D form: rows are anchors
        feats = torch.randn(6, 5, generator=g, dtype=D64)
        rows, ys = as_rows(feats), labels.tolist()
    else:  # 3-D form: flattened view-major
        feats = torch.randn(6, views, 5, generator=g, dtype=D64)
        rows = [feats[b, v].tolist() for v in range(views) for b in range(6)]
        ys = labels.tolist() * views
    tb = t if t_base is None else t_base
    ref = ref_supcon_anchors(rows, ys, t, tb)
    got = supcon_loss(feats, labels, temperature=t, base_temperature=t_base)
    approx(got, sum(ref) / len(ref))
    got_sum = supcon_loss(feats, labels, t, t_base, reduction="sum")
    approx(got_sum, sum(ref))


@pytest.mark.parametrize("seed", SEEDS)
def test_supcon_unnormalized_matches_loop(seed: int) -> None:
    g = gen(seed)
    feats = torch.randn(7, 4, generator=g, dtype=D64)
    labels = torch.tensor([0, 1, 0, 2, 1, 0, 3])
    ref = ref_supcon_anchors(as_rows(feats), labels.tolist(), 0.5, 0.5, normalize=False)
    got = supcon_loss(feats, labels, temperature=0.5, normalize=False)
    approx(got, sum(ref) / len(ref))


def test_supcon_anchor_without_positive_counts_as_zero_in_mean() -> None:
    g = gen(5)
    feats = torch.randn(4, 3, generator=g, dtype=D64)
    labels = torch.tensor([0, 0, 1, 2])  # anchors 2 and 3 have no positive
    full = supcon_loss(feats, labels, reduction="sum")
    only_pair = supcon_loss(feats, labels, reduction="mean")
    assert only_pair.item() == pytest.approx(full.item() / 4, rel=1e-12)
    # no positives at all: exactly 0, still differentiable
    feats.requires_grad_(True)
    zero = supcon_loss(feats, torch.arange(4))
    assert zero.item() == 0.0
    zero.backward()
    assert feats.grad is not None and torch.all(feats.grad == 0)


@pytest.mark.parametrize("seed", SEEDS)
def test_supcon_simclr_mode_and_view_major_layout(seed: int) -> None:
    g = gen(seed)
    feats = torch.randn(5, 2, 8, generator=g, dtype=D64)
    simclr = supcon_loss(feats, None, temperature=0.2)
    explicit = supcon_loss(feats, torch.arange(5), temperature=0.2)
    assert torch.allclose(simclr, explicit, rtol=1e-12)
    labels = torch.tensor([1, 0, 1, 1, 0])
    stacked = torch.cat([feats[:, 0], feats[:, 1]], dim=0)
    assert torch.allclose(
        supcon_loss(feats, labels), supcon_loss(stacked, labels.repeat(2)), rtol=1e-12
    )
    # cosine similarity: invariant to positive rescaling of the rows
    scale = torch.rand(5, 2, 1, generator=g, dtype=D64) * 10 + 0.1
    assert torch.allclose(
        supcon_loss(feats * scale, labels), supcon_loss(feats, labels)
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_paired_supcon_is_supcon_over_the_2b_samples(seed: int) -> None:
    g = gen(seed)
    z = torch.randn(6, 5, generator=g, dtype=D64)
    zv = torch.randn(6, 5, generator=g, dtype=D64)
    labels = torch.tensor(LABEL_PATTERNS_B6["singleton"])
    ref = ref_supcon_anchors(as_rows(z) + as_rows(zv), labels.tolist() * 2, 0.1, 0.1)
    approx(paired_supcon(z, zv, labels), sum(ref) / len(ref))
    approx(paired_supcon(z, zv, labels, reduction="sum"), sum(ref))
    # FedStain Eq. 4 is symmetric in which set is called the view
    assert torch.allclose(paired_supcon(z, zv, labels), paired_supcon(zv, z, labels))


def test_supcon_large_logits_stay_finite() -> None:
    g = gen(0)
    feats = (torch.randn(8, 2, 4, generator=g) * 1e3).requires_grad_(True)
    labels = torch.tensor([0, 1, 0, 1, 2, 2, 3, 0])
    loss = supcon_loss(feats, labels, temperature=1e-3, normalize=False)
    loss.backward()
    assert torch.isfinite(loss) and feats.grad is not None
    assert torch.isfinite(feats.grad).all()


# ------------------------------------------------------------------ FedCCRL variant
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("t", [0.07, 0.1, 0.5])
@pytest.mark.parametrize("pattern", list(LABEL_PATTERNS_B6))
def test_fedccrl_matches_loop_and_notes_identity(
    seed: int, t: float, pattern: str
) -> None:
    g = gen(seed)
    z = torch.randn(6, 16, generator=g, dtype=D64)
    zv = torch.randn(6, 16, generator=g, dtype=D64)
    labels = torch.tensor(LABEL_PATTERNS_B6[pattern])
    got = fedccrl_contrastive(z, zv, labels, temperature=t)
    approx(got, ref_fedccrl(as_rows(z), as_rows(zv), labels.tolist(), t))

    # baselines.md section 6: S_i = (|P(i)| SupCon_i + LSE_i - 1/t) / (|P(i)| + 1)
    rows, ys = as_rows(z) + as_rows(zv), labels.tolist() * 2
    supcon_i = ref_supcon_anchors(rows, ys, t, t)
    lse_i = ref_lse(rows, t)
    n_pos = [
        sum(1 for p in range(len(ys)) if p != i and ys[p] == ys[i]) for i in range(12)
    ]
    s_i = [
        (n * sc + lse - 1 / t) / (n + 1)
        for n, sc, lse in zip(n_pos, supcon_i, lse_i, strict=True)
    ]
    approx(got, sum(s_i) / len(s_i))
    # the repo's S is not SupCon (unless every anchor is positive-free)
    if pattern != "all_distinct":
        assert abs(got.item() - paired_supcon(z, zv, labels, t).item()) > 1e-3


def test_fedccrl_self_term_has_no_gradient_and_order_free() -> None:
    g = gen(3)
    z = torch.randn(5, 4, generator=g, dtype=D64, requires_grad=True)
    zv = torch.randn(5, 4, generator=g, dtype=D64, requires_grad=True)
    labels = torch.tensor([0, 1, 0, 2, 1])
    assert torch.allclose(
        fedccrl_contrastive(z, zv, labels), fedccrl_contrastive(zv, z, labels)
    )
    assert torch.autograd.gradcheck(
        lambda a, b: fedccrl_contrastive(a, b, labels, 0.5), (z, zv)
    )


def _loss_cases() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    lab = torch.tensor([0, 1, 0, 2])
    return {
        "supcon_2d": lambda x: supcon_loss(x.reshape(8, 3), lab.repeat(2)),
        "supcon_3d_simclr": lambda x: supcon_loss(x.reshape(4, 2, 3), None, 0.07, 0.1),
        "supcon_raw": lambda x: supcon_loss(
            x.reshape(8, 3), lab.repeat(2), 0.5, None, False
        ),
        "paired_supcon": lambda x: paired_supcon(x[:4], x[4:], lab),
        "fedccrl": lambda x: fedccrl_contrastive(x[:4], x[4:], lab),
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
            (lambda: supcon_loss(torch.randn(4), lab), ValueError, "features"),
            (lambda: supcon_loss(torch.randn(1, 2, 3, 4), lab), ValueError, "features"),
            (lambda: supcon_loss(x2, None), ValueError, r"\(B, V, D\)"),
            (lambda: supcon_loss(x2, lab[:3]), ValueError, "labels"),
            (lambda: supcon_loss(x3, lab.repeat(2)), ValueError, "labels"),
            (lambda: supcon_loss(x2, lab, temperature=0.0), ValueError, "temperature"),
            (lambda: supcon_loss(x2, lab, 0.1, -1.0), ValueError, "base_temperature"),
            (lambda: supcon_loss(x2, lab, reduction="none"), ValueError, "reduction"),  # type: ignore[arg-type]
            (lambda: supcon_loss(x2[:1], lab[:1]), ValueError, "at least 2"),
            (lambda: supcon_loss(lab.reshape(2, 2), lab[:2]), ValueError, "floating"),
            (lambda: supcon_loss(x2.tolist(), lab), TypeError, "features"),  # type: ignore[arg-type]
            (lambda: paired_supcon(x2, x2[:3], lab), ValueError, "z_view"),
            (
                lambda: fedccrl_contrastive(x2, torch.randn(4, 5), lab),
                ValueError,
                "z_view",
            ),
            (lambda: fedccrl_contrastive(x2, x2, lab[:2]), ValueError, "labels"),
            (lambda: fedccrl_contrastive(x2, x2, lab, -0.1), ValueError, "temperature"),
        ]
    )
