"""Tests of fedpath.losses against slow, loop-by-loop float64 transcriptions."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from fedpath.losses import (
    fedccrl_contrastive,
    generalized_cross_entropy,
    js_divergence,
    moon_contrastive,
    nt_xent,
    orthogonality_loss,
    paired_supcon,
    proximal_term,
    snapshot_parameters,
    supcon_loss,
    teacher_alignment_loss,
)

SEEDS = [0, 1, 2, 3]
D64 = torch.float64


# ------------------------------------------------------------------ slow references
def _unit(v: list[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v))
    return [x / max(n, 1e-12) for x in v]


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _cos(a: list[float], b: list[float]) -> float:
    return _dot(_unit(a), _unit(b))


def _rows(x: torch.Tensor) -> list[list[float]]:
    return x.detach().to(D64).tolist()


def ref_supcon_anchors(
    rows: list[list[float]],
    labels: list[int],
    t: float,
    t_base: float,
    normalize: bool = True,
) -> list[float]:
    """Per-anchor L_out, Khosla et al. 2020 Eq. 2, one anchor at a time."""
    z = [_unit(r) if normalize else r for r in rows]
    out = []
    for i in range(len(z)):
        others = [a for a in range(len(z)) if a != i]
        denom = sum(math.exp(_dot(z[i], z[a]) / t) for a in others)
        positives = [p for p in others if labels[p] == labels[i]]
        if not positives:
            out.append(0.0)
            continue
        acc = 0.0
        for p in positives:
            acc += math.log(math.exp(_dot(z[i], z[p]) / t) / denom)
        out.append(-(t / t_base) * acc / len(positives))
    return out


def ref_lse(rows: list[list[float]], t: float) -> list[float]:
    z = [_unit(r) for r in rows]
    return [
        math.log(sum(math.exp(_dot(z[i], z[a]) / t) for a in range(len(z)) if a != i))
        for i in range(len(z))
    ]


def ref_fedccrl(
    z: list[list[float]], zv: list[list[float]], labels: list[int], t: float
) -> float:
    """Repo S: positives = same label incl. self, denominator = all but self."""
    samples = [_unit(r) for r in z + zv]
    ys = labels + labels
    total = 0.0
    for i in range(len(samples)):
        s = [_dot(samples[i], samples[j]) / t for j in range(len(samples))]
        denom = sum(math.exp(s[a]) for a in range(len(samples)) if a != i)
        pos = [s[p] for p in range(len(samples)) if ys[p] == ys[i]]  # incl. i
        total += -sum(pos) / len(pos) + math.log(denom)
    return total / len(samples)


def ref_nt_xent(z1: list[list[float]], z2: list[list[float]], t: float) -> float:
    z = z1 + z2
    n = len(z1)
    total = 0.0
    for i in range(2 * n):
        p = (i + n) % (2 * n)
        denom = sum(math.exp(_cos(z[i], z[j]) / t) for j in range(2 * n) if j != i)
        total += -math.log(math.exp(_cos(z[i], z[p]) / t) / denom)
    return total / (2 * n)


def ref_js(logit_sets: list[list[list[float]]], eps: float = 1e-7) -> float:
    m_count = len(logit_sets)
    b = len(logit_sets[0])
    total = 0.0
    for row in range(b):
        probs = []
        for k in range(m_count):
            e = [math.exp(v) for v in logit_sets[k][row]]
            probs.append([v / sum(e) for v in e])
        c = len(probs[0])
        mix = [min(max(sum(p[j] for p in probs) / m_count, eps), 1.0) for j in range(c)]
        for p in probs:
            total += sum(p[j] * math.log(p[j] / mix[j]) for j in range(c) if p[j] > 0)
    return total / (m_count * b)


def ref_gce(logits: list[list[float]], targets: list[int], q: float) -> list[float]:
    out = []
    for row, y in zip(logits, targets, strict=True):
        e = [math.exp(v) for v in row]
        p_y = e[y] / sum(e)
        out.append((1 - p_y**q) / q)
    return out


def _views(x: torch.Tensor) -> list[list[list[float]]]:
    """(B, D) -> one view per sample; (B, V, D) -> V views per sample."""
    x = x.detach().to(D64)
    return [[r] for r in x.tolist()] if x.dim() == 2 else x.tolist()


def ref_align(zs: torch.Tensor, zd: torch.Tensor, zg: torch.Tensor, w: float) -> float:
    """FedAD Eq. 3 per sample (sum over views), then the batch mean."""
    per = []
    for s_v, d_v, g_v in zip(_views(zs), _views(zd), _views(zg), strict=True):
        acc = 0.0
        for s, d, g in zip(s_v, d_v, g_v, strict=True):
            acc += (1 - _cos(s, g)) + (1 + _cos(d, g))
        per.append(w / 2 * acc)
    return sum(per) / len(per)


def ref_ortho(zs: torch.Tensor, zd: torch.Tensor, gamma: float) -> float:
    per = []
    for s_v, d_v in zip(_views(zs), _views(zd), strict=True):
        per.append(
            gamma / 2 * sum(_cos(s, d) ** 2 for s, d in zip(s_v, d_v, strict=True))
        )
    return sum(per) / len(per)


def ref_moon(
    z: list[list[float]], zg: list[list[float]], zps: list[list[list[float]]], t: float
) -> float:
    total = 0.0
    for i in range(len(z)):
        pos = math.exp(_cos(z[i], zg[i]) / t)
        neg = sum(math.exp(_cos(z[i], zp[i]) / t) for zp in zps)
        total += -math.log(pos / (pos + neg))
    return total / len(z)


# ------------------------------------------------------------------------ helpers
def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


LABEL_PATTERNS_B6 = {
    # sample 5 has no same-class partner (only its own other views in (B, V, D))
    "singleton": [0, 0, 1, 1, 1, 2],
    "all_same": [3, 3, 3, 3, 3, 3],
    "all_distinct": [0, 1, 2, 3, 4, 5],
    "mixed": [2, 0, 2, 1, 0, 2],
}


def _approx(x: torch.Tensor, ref: float, rel: float = 1e-9, abs_: float = 1e-9) -> None:
    assert x.item() == pytest.approx(ref, rel=rel, abs=abs_)


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
    g = _gen(seed)
    labels = torch.tensor(LABEL_PATTERNS_B6[pattern])
    t, t_base = [(0.1, None), (0.07, 0.07), (0.2, 0.07), (0.5, 1.0)][seed]
    if views == 1:  # 2-D form: rows are anchors
        feats = torch.randn(6, 5, generator=g, dtype=D64)
        rows, ys = _rows(feats), labels.tolist()
    else:  # 3-D form: flattened view-major
        feats = torch.randn(6, views, 5, generator=g, dtype=D64)
        rows = [feats[b, v].tolist() for v in range(views) for b in range(6)]
        ys = labels.tolist() * views
    tb = t if t_base is None else t_base
    ref = ref_supcon_anchors(rows, ys, t, tb)
    got = supcon_loss(feats, labels, temperature=t, base_temperature=t_base)
    _approx(got, sum(ref) / len(ref))
    got_sum = supcon_loss(feats, labels, t, t_base, reduction="sum")
    _approx(got_sum, sum(ref))


@pytest.mark.parametrize("seed", SEEDS)
def test_supcon_unnormalized_matches_loop(seed: int) -> None:
    g = _gen(seed)
    feats = torch.randn(7, 4, generator=g, dtype=D64)
    labels = torch.tensor([0, 1, 0, 2, 1, 0, 3])
    ref = ref_supcon_anchors(_rows(feats), labels.tolist(), 0.5, 0.5, normalize=False)
    got = supcon_loss(feats, labels, temperature=0.5, normalize=False)
    _approx(got, sum(ref) / len(ref))


def test_supcon_anchor_without_positive_counts_as_zero_in_mean() -> None:
    g = _gen(5)
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
    g = _gen(seed)
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
    g = _gen(seed)
    z = torch.randn(6, 5, generator=g, dtype=D64)
    zv = torch.randn(6, 5, generator=g, dtype=D64)
    labels = torch.tensor(LABEL_PATTERNS_B6["singleton"])
    ref = ref_supcon_anchors(_rows(z) + _rows(zv), labels.tolist() * 2, 0.1, 0.1)
    _approx(paired_supcon(z, zv, labels), sum(ref) / len(ref))
    _approx(paired_supcon(z, zv, labels, reduction="sum"), sum(ref))
    # FedStain Eq. 4 is symmetric in which set is called the view
    assert torch.allclose(paired_supcon(z, zv, labels), paired_supcon(zv, z, labels))


def test_supcon_large_logits_stay_finite() -> None:
    g = _gen(0)
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
    g = _gen(seed)
    z = torch.randn(6, 16, generator=g, dtype=D64)
    zv = torch.randn(6, 16, generator=g, dtype=D64)
    labels = torch.tensor(LABEL_PATTERNS_B6[pattern])
    got = fedccrl_contrastive(z, zv, labels, temperature=t)
    _approx(got, ref_fedccrl(_rows(z), _rows(zv), labels.tolist(), t))

    # baselines.md section 6: S_i = (|P(i)| SupCon_i + LSE_i - 1/t) / (|P(i)| + 1)
    rows, ys = _rows(z) + _rows(zv), labels.tolist() * 2
    supcon_i = ref_supcon_anchors(rows, ys, t, t)
    lse_i = ref_lse(rows, t)
    n_pos = [
        sum(1 for p in range(len(ys)) if p != i and ys[p] == ys[i]) for i in range(12)
    ]
    s_i = [
        (n * sc + lse - 1 / t) / (n + 1)
        for n, sc, lse in zip(n_pos, supcon_i, lse_i, strict=True)
    ]
    _approx(got, sum(s_i) / len(s_i))
    # the repo's S is not SupCon (unless every anchor is positive-free)
    if pattern != "all_distinct":
        assert abs(got.item() - paired_supcon(z, zv, labels, t).item()) > 1e-3


def test_fedccrl_self_term_has_no_gradient_and_order_free() -> None:
    g = _gen(3)
    z = torch.randn(5, 4, generator=g, dtype=D64, requires_grad=True)
    zv = torch.randn(5, 4, generator=g, dtype=D64, requires_grad=True)
    labels = torch.tensor([0, 1, 0, 2, 1])
    assert torch.allclose(
        fedccrl_contrastive(z, zv, labels), fedccrl_contrastive(zv, z, labels)
    )
    assert torch.autograd.gradcheck(
        lambda a, b: fedccrl_contrastive(a, b, labels, 0.5), (z, zv)
    )


# ----------------------------------------------------------------------------- JS
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("m", [2, 3, 4])
def test_js_matches_loop(seed: int, m: int) -> None:
    g = _gen(seed)
    logits = [torch.randn(5, 4, generator=g, dtype=D64) * 3 for _ in range(m)]
    _approx(js_divergence(logits), ref_js([_rows(lg) for lg in logits]), rel=1e-9)


def test_js_properties() -> None:
    g = _gen(11)
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
    g = _gen(2)
    logits = [torch.randn(7, 3, generator=g) for _ in range(3)]
    probs = [lg.softmax(1) for lg in logits]
    log_m = torch.clamp(sum(probs) / 3, 1e-7, 1).log()
    expected = sum(F.kl_div(log_m, p, reduction="batchmean") for p in probs) / 3
    assert torch.allclose(js_divergence(logits), expected, atol=1e-6)


# ---------------------------------------------------------------------------- GCE
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("q", [0.1, 0.5, 0.7, 1.0])
def test_gce_matches_loop(seed: int, q: float) -> None:
    g = _gen(seed)
    logits = torch.randn(6, 4, generator=g, dtype=D64) * 2
    targets = torch.randint(0, 4, (6,), generator=g)
    ref = ref_gce(_rows(logits), targets.tolist(), q)
    _approx(generalized_cross_entropy(logits, targets, q), sum(ref) / 6)
    _approx(generalized_cross_entropy(logits, targets, q, reduction="sum"), sum(ref))
    none = generalized_cross_entropy(logits, targets, q, reduction="none")
    assert none.shape == (6,)
    assert torch.allclose(none, torch.tensor(ref, dtype=D64), rtol=1e-10)


def test_gce_limits() -> None:
    g = _gen(4)
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


# ------------------------------------------------------------------------- NT-Xent
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [2, 3, 6])
@pytest.mark.parametrize("t", [0.1, 0.5])
def test_nt_xent_matches_loop(seed: int, n: int, t: float) -> None:
    g = _gen(seed)
    z1 = torch.randn(n, 7, generator=g, dtype=D64)
    z2 = torch.randn(n, 7, generator=g, dtype=D64)
    _approx(nt_xent(z1, z2, t), ref_nt_xent(_rows(z1), _rows(z2), t))
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
    g = _gen(seed)
    zs, zd, zg = (torch.randn(*shape, generator=g, dtype=D64) for _ in range(3))
    _approx(teacher_alignment_loss(zs, zd, zg, 0.7), ref_align(zs, zd, zg, 0.7))
    _approx(orthogonality_loss(zs, zd, 2.0), ref_ortho(zs, zd, 2.0))
    _approx(orthogonality_loss(zs, zd, 0.5), ref_ortho(zs, zd, 0.5))


def test_teacher_alignment_paper_normalisation_and_detach() -> None:
    g = _gen(9)
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
    g = _gen(seed)
    z, zg = (torch.randn(5, 6, generator=g, dtype=D64) for _ in range(2))
    prevs = [torch.randn(5, 6, generator=g, dtype=D64) for _ in range(k)]
    ref = ref_moon(_rows(z), _rows(zg), [_rows(p) for p in prevs], 0.5)
    arg: torch.Tensor | list[torch.Tensor] = prevs[0] if k == 1 else prevs
    _approx(moon_contrastive(z, zg, arg, 0.5), ref)
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
    g = _gen(1)
    z = torch.randn(3, 4, generator=g, requires_grad=True)
    zg = torch.randn(3, 4, generator=g, requires_grad=True)
    zp = torch.randn(3, 4, generator=g, requires_grad=True)
    for empty in (None, []):
        out = moon_contrastive(z, zg, empty)
        assert out.item() == 0.0 and out.dtype == z.dtype and out.shape == ()
    moon_contrastive(z, zg, zp, 0.5).backward()
    assert zg.grad is None and zp.grad is None
    assert z.grad is not None and torch.isfinite(z.grad).all()


# ---------------------------------------------------------------------- gradients
def _loss_cases() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    lab = torch.tensor([0, 1, 0, 2])
    # teacher / previous-model outputs are detached by the losses: keep them constant
    fixed = torch.randn(4, 3, generator=_gen(7), dtype=D64)

    return {
        "supcon_2d": lambda x: supcon_loss(x.reshape(8, 3), lab.repeat(2)),
        "supcon_3d_simclr": lambda x: supcon_loss(x.reshape(4, 2, 3), None, 0.07, 0.1),
        "supcon_raw": lambda x: supcon_loss(
            x.reshape(8, 3), lab.repeat(2), 0.5, None, False
        ),
        "paired_supcon": lambda x: paired_supcon(x[:4], x[4:], lab),
        "fedccrl": lambda x: fedccrl_contrastive(x[:4], x[4:], lab),
        "js": lambda x: js_divergence([x[:4], x[4:]]),
        "gce": lambda x: generalized_cross_entropy(x, torch.tensor([0, 1, 2, 0] * 2)),
        "nt_xent": lambda x: nt_xent(x[:4], x[4:]),
        "align": lambda x: teacher_alignment_loss(x[:4], x[4:], fixed, 0.5),
        "ortho": lambda x: orthogonality_loss(x[:4], x[4:]),
        "moon": lambda x: moon_contrastive(x[:4], fixed, fixed.roll(1, 0)),
    }


@pytest.mark.parametrize("name", list(_loss_cases()))
def test_gradients_finite_and_correct(name: str) -> None:
    fn = _loss_cases()[name]
    x = torch.randn(8, 3, generator=_gen(0), dtype=D64, requires_grad=True)
    out = fn(x)
    assert out.shape == () and torch.isfinite(out)
    (grad,) = torch.autograd.grad(out, x)
    assert torch.isfinite(grad).all()
    assert torch.autograd.gradcheck(fn, (x,))
    # float32 with a zero row and huge values: still finite
    y = torch.randn(8, 3, generator=_gen(1)) * 1e3
    y[2] = 0.0
    y.requires_grad_(True)
    out32 = fn(y)
    (grad32,) = torch.autograd.grad(out32, y)
    assert torch.isfinite(out32) and torch.isfinite(grad32).all()


# -------------------------------------------------------------------------- FedProx
def _params(seed: int) -> list[torch.Tensor]:
    shapes = [(4, 3), (3,), (2, 2, 2), (1,), (5,)]
    return [torch.randn(s, generator=_gen(seed + i)) for i, s in enumerate(shapes)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mu", [0.0, 0.01, 1.0])
def test_proximal_term_matches_loop_and_gradient(seed: int, mu: float) -> None:
    anchor = _params(seed)
    params = [
        (a + 0.3 * torch.randn(a.shape, generator=_gen(99 + seed))) for a in anchor
    ]
    params = [p.requires_grad_(True) for p in params]
    prox = proximal_term(params, anchor, mu)
    # Li et al. 2020, Eq. 2: (mu / 2) * sum over every entry of (w - w_g)^2
    ref = sum(
        (x - y) ** 2
        for p, a in zip(params, anchor, strict=True)
        for x, y in zip(
            _rows(p.flatten()[None])[0], _rows(a.flatten()[None])[0], strict=True
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


# ---------------------------------------------------------------------- bad input
def test_bad_inputs_raise() -> None:
    x2 = torch.randn(4, 3)
    x3 = torch.randn(4, 2, 3)
    lab = torch.tensor([0, 1, 0, 1])
    cases: list[tuple[Callable[[], object], type[Exception], str]] = [
        (lambda: supcon_loss(torch.randn(4), lab), ValueError, "features"),
        (lambda: supcon_loss(torch.randn(1, 2, 3, 4), lab), ValueError, "features"),
        (lambda: supcon_loss(x2, None), ValueError, r"\(B, V, D\)"),
        (lambda: supcon_loss(x2, lab[:3]), ValueError, "labels"),
        (lambda: supcon_loss(x3, lab.repeat(2)), ValueError, "labels"),
        (lambda: supcon_loss(x2, lab, temperature=0.0), ValueError, "temperature"),
        (lambda: supcon_loss(x2, lab, 0.1, -1.0), ValueError, "base_temperature"),
        (lambda: supcon_loss(x2, lab, reduction="none"), ValueError, "reduction"),
        (lambda: supcon_loss(x2[:1], lab[:1]), ValueError, "at least 2"),
        (lambda: supcon_loss(lab.reshape(2, 2), lab[:2]), ValueError, "floating"),
        (lambda: supcon_loss(x2.tolist(), lab), TypeError, "features"),
        (lambda: paired_supcon(x2, x2[:3], lab), ValueError, "z_view"),
        (lambda: fedccrl_contrastive(x2, torch.randn(4, 5), lab), ValueError, "z_view"),
        (lambda: fedccrl_contrastive(x2, x2, lab[:2]), ValueError, "labels"),
        (lambda: fedccrl_contrastive(x2, x2, lab, -0.1), ValueError, "temperature"),
        (lambda: js_divergence([x2]), ValueError, "at least 2"),
        (lambda: js_divergence(x2), TypeError, "sequence"),
        (lambda: js_divergence([x2, torch.randn(4, 4)]), ValueError, r"logits\[1\]"),
        (lambda: js_divergence([x2, x2], eps=0.0), ValueError, "eps"),
        (lambda: generalized_cross_entropy(x2, lab, q=0.0), ValueError, "q"),
        (lambda: generalized_cross_entropy(x2, lab, q=1.5), ValueError, "q"),
        (lambda: generalized_cross_entropy(x2, lab.float()), ValueError, "targets"),
        (lambda: generalized_cross_entropy(x2, lab + 5), ValueError, "targets"),
        (lambda: generalized_cross_entropy(x2, lab[:2]), ValueError, "targets"),
        (lambda: generalized_cross_entropy(x3, lab), ValueError, "logits"),
        (lambda: generalized_cross_entropy(x2, lab, reduction="x"), ValueError, "red"),
        (lambda: nt_xent(x2, x2[:3]), ValueError, "z2"),
        (lambda: nt_xent(x3, x3), ValueError, "z1"),
        (lambda: nt_xent(x2, x2, temperature=float("nan")), ValueError, "temp"),
        (lambda: teacher_alignment_loss(x2, x2, x3, 1.0), ValueError, "z_g"),
        (lambda: teacher_alignment_loss(x2, x2[:2], x2, 1.0), ValueError, "z_d"),
        (lambda: teacher_alignment_loss(x2, x2, x2, -1.0), ValueError, "weight"),
        (lambda: teacher_alignment_loss(x2[0], x2[0], x2[0], 1.0), ValueError, "z_s"),
        (lambda: orthogonality_loss(x2, x3), ValueError, "z_d"),
        (lambda: orthogonality_loss(x2, x2, gamma=-2.0), ValueError, "gamma"),
        (lambda: moon_contrastive(x2, x3, None), ValueError, "z_glob"),
        (lambda: moon_contrastive(x2, x2, x2[:2]), ValueError, "z_prev"),
        (lambda: moon_contrastive(x2, x2, [x2, x3]), ValueError, r"z_prev\[1\]"),
        (lambda: moon_contrastive(x2, x2, x2, 0.0), ValueError, "temperature"),
    ]
    for fn, exc, pattern in cases:
        with pytest.raises(exc, match=pattern):
            fn()
