"""Slow loop references of the losses' formulas and shared test helpers."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

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


def as_rows(x: torch.Tensor) -> list[list[float]]:
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
def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


LABEL_PATTERNS_B6 = {
    # sample 5 has no same-class partner (only its own other views in (B, V, D))
    "singleton": [0, 0, 1, 1, 1, 2],
    "all_same": [3, 3, 3, 3, 3, 3],
    "all_distinct": [0, 1, 2, 3, 4, 5],
    "mixed": [2, 0, 2, 1, 0, 2],
}


def approx(x: torch.Tensor, ref: float, rel: float = 1e-9, abs_: float = 1e-9) -> None:
    assert x.item() == pytest.approx(ref, rel=rel, abs=abs_)


def check_gradients(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """``fn`` of an (8, 3) input: a finite scalar with finite gradients that pass
    ``gradcheck`` in float64, and stay finite in float32 with a zero row and
    huge values."""
    x = torch.randn(8, 3, generator=gen(0), dtype=D64, requires_grad=True)
    out = fn(x)
    assert out.shape == () and torch.isfinite(out)
    (grad,) = torch.autograd.grad(out, x)
    assert torch.isfinite(grad).all()
    assert torch.autograd.gradcheck(fn, (x,))
    # float32 with a zero row and huge values: still finite
    y = torch.randn(8, 3, generator=gen(1)) * 1e3
    y[2] = 0.0
    y.requires_grad_(True)
    out32 = fn(y)
    (grad32,) = torch.autograd.grad(out32, y)
    assert torch.isfinite(out32) and torch.isfinite(grad32).all()


def check_errors(
    cases: list[tuple[Callable[[], object], type[Exception], str]],
) -> None:
    """Each call raises its exception with a message matching its pattern."""
    for fn, exc, pattern in cases:
        with pytest.raises(exc, match=pattern):
            fn()
