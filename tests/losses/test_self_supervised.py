"""NT-Xent, FedAD's alignment and orthogonality, and MOON
(fedpath.losses.self_supervised), against slow loops over their formulas."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from fedpath.losses.self_supervised import (
    moon_contrastive,
    nt_xent,
    orthogonality_loss,
    teacher_alignment_loss,
)
from fedpath.losses.supervised import supcon_loss
from tests.losses.references import (
    D64,
    SEEDS,
    approx,
    as_rows,
    check_errors,
    check_gradients,
    gen,
    ref_align,
    ref_moon,
    ref_nt_xent,
    ref_ortho,
)


# ------------------------------------------------------------------------- NT-Xent
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [2, 3, 6])
@pytest.mark.parametrize("t", [0.1, 0.5])
def test_nt_xent_matches_loop(seed: int, n: int, t: float) -> None:
    g = gen(seed)
    z1 = torch.randn(n, 7, generator=g, dtype=D64)
    z2 = torch.randn(n, 7, generator=g, dtype=D64)
    approx(nt_xent(z1, z2, t), ref_nt_xent(as_rows(z1), as_rows(z2), t))
    same = supcon_loss(torch.stack([z1, z2], 1), None, temperature=t)
    assert torch.allclose(nt_xent(z1, z2, t), same, rtol=1e-12)


def test_nt_xent_needs_two_images() -> None:
    z = torch.randn(1, 4)
    with pytest.raises(ValueError, match="NT-Xent needs at least 2 images per batch"):
        nt_xent(z, z)


# ------------------------------------------------------------------- FedAD Eq. 3-4
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", [(5, 6), (5, 2, 6), (4, 3, 6)])
def test_teacher_alignment_and_orthogonality_match_loop(
    seed: int, shape: tuple[int, ...]
) -> None:
    g = gen(seed)
    zs, zd, zg = (torch.randn(*shape, generator=g, dtype=D64) for _ in range(3))
    approx(teacher_alignment_loss(zs, zd, zg, 0.7), ref_align(zs, zd, zg, 0.7))
    approx(orthogonality_loss(zs, zd, 2.0), ref_ortho(zs, zd, 2.0))
    approx(orthogonality_loss(zs, zd, 0.5), ref_ortho(zs, zd, 0.5))


def test_teacher_alignment_paper_normalisation_and_detach() -> None:
    g = gen(9)
    zs = torch.randn(4, 2, 8, generator=g, dtype=D64, requires_grad=True)
    zd = torch.randn(4, 2, 8, generator=g, dtype=D64, requires_grad=True)
    zg = torch.randn(4, 2, 8, generator=g, dtype=D64, requires_grad=True)
    lam = 0.3
    loss = teacher_alignment_loss(zs, zd, zg, lam)
    # two views: lam/2 * sum_v [...] = lam * mean over views and batch
    bracket = (1 - F.cosine_similarity(zs, zg, dim=-1)) + (
        1 + F.cosine_similarity(zd, zg, dim=-1)
    )
    assert loss.item() == pytest.approx(lam * bracket.mean().item(), rel=1e-10)
    loss.backward()
    assert zg.grad is None  # frozen teacher
    assert zs.grad is not None and zd.grad is not None
    # extremes: aligned semantic + anti-aligned domain -> 0; the reverse -> 2 lam V
    v = torch.randn(3, 2, 5, generator=g, dtype=D64)
    assert teacher_alignment_loss(v, -v, v, lam).item() == pytest.approx(0, abs=1e-12)
    assert teacher_alignment_loss(-v, v, v, lam).item() == pytest.approx(4 * lam)
    assert teacher_alignment_loss(v, v, v, 0.0).item() == 0.0


def test_orthogonality_extremes() -> None:
    a = torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    b = torch.tensor([[0.0, 3.0, 0.0], [0.0, 0.0, -1.0]])
    assert orthogonality_loss(a, b, 2.0).item() == pytest.approx(0.0, abs=1e-12)
    assert orthogonality_loss(a, -5 * a, 2.0).item() == pytest.approx(1.0)
    pair = torch.stack([a, a], 1)
    assert orthogonality_loss(pair, pair, 2.0).item() == pytest.approx(2.0)


# --------------------------------------------------------------------------- MOON
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("k", [1, 2])
def test_moon_matches_loop(seed: int, k: int) -> None:
    g = gen(seed)
    z, zg = (torch.randn(5, 6, generator=g, dtype=D64) for _ in range(2))
    prevs = [torch.randn(5, 6, generator=g, dtype=D64) for _ in range(k)]
    ref = ref_moon(as_rows(z), as_rows(zg), [as_rows(p) for p in prevs], 0.5)
    arg: torch.Tensor | list[torch.Tensor] = prevs[0] if k == 1 else prevs
    approx(moon_contrastive(z, zg, arg, 0.5), ref)
    # the reference's CE-with-label-0 formulation
    logits = torch.stack(
        [F.cosine_similarity(z, zg, dim=-1)]
        + [F.cosine_similarity(z, p, dim=-1) for p in prevs],
        dim=1,
    )
    ce = F.cross_entropy(logits / 0.5, torch.zeros(5, dtype=torch.long))
    assert moon_contrastive(z, zg, arg, 0.5).item() == pytest.approx(
        ce.item(), rel=1e-9
    )


def test_moon_round_zero_and_detach() -> None:
    g = gen(1)
    z = torch.randn(3, 4, generator=g, requires_grad=True)
    zg = torch.randn(3, 4, generator=g, requires_grad=True)
    zp = torch.randn(3, 4, generator=g, requires_grad=True)
    empty: list[torch.Tensor] | None
    for empty in (None, []):
        out = moon_contrastive(z, zg, empty)
        assert out.item() == 0.0 and out.dtype == z.dtype and out.shape == ()
    moon_contrastive(z, zg, zp, 0.5).backward()
    assert zg.grad is None and zp.grad is None
    assert z.grad is not None and torch.isfinite(z.grad).all()


def _loss_cases() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    # teacher / previous-model outputs are detached by the losses: keep them constant
    fixed = torch.randn(4, 3, generator=gen(7), dtype=D64)
    return {
        "nt_xent": lambda x: nt_xent(x[:4], x[4:]),
        "align": lambda x: teacher_alignment_loss(x[:4], x[4:], fixed, 0.5),
        "ortho": lambda x: orthogonality_loss(x[:4], x[4:]),
        "moon": lambda x: moon_contrastive(x[:4], fixed, fixed.roll(1, 0)),
    }


@pytest.mark.parametrize("name", list(_loss_cases()))
def test_gradients_finite_and_correct(name: str) -> None:
    check_gradients(_loss_cases()[name])


def test_bad_inputs_raise() -> None:
    x2 = torch.randn(4, 3)
    x3 = torch.randn(4, 2, 3)
    check_errors(
        [
            (lambda: nt_xent(x2, x2[:3]), ValueError, "z2"),
            (lambda: nt_xent(x3, x3), ValueError, "z1"),
            (lambda: nt_xent(x2, x2, temperature=float("nan")), ValueError, "temp"),
            (lambda: teacher_alignment_loss(x2, x2, x3, 1.0), ValueError, "z_g"),
            (lambda: teacher_alignment_loss(x2, x2[:2], x2, 1.0), ValueError, "z_d"),
            (lambda: teacher_alignment_loss(x2, x2, x2, -1.0), ValueError, "weight"),
            (
                lambda: teacher_alignment_loss(x2[0], x2[0], x2[0], 1.0),
                ValueError,
                "z_s",
            ),
            (lambda: orthogonality_loss(x2, x3), ValueError, "z_d"),
            (lambda: orthogonality_loss(x2, x2, gamma=-2.0), ValueError, "gamma"),
            (lambda: moon_contrastive(x2, x3, None), ValueError, "z_glob"),
            (lambda: moon_contrastive(x2, x2, x2[:2]), ValueError, "z_prev"),
            (lambda: moon_contrastive(x2, x2, [x2, x3]), ValueError, r"z_prev\[1\]"),
            (lambda: moon_contrastive(x2, x2, x2, 0.0), ValueError, "temperature"),
        ]
    )
