"""Batched EM for Gaussian mixtures: k-means++ seeding, E/M steps, re-seeding.

As scikit-learn's ``GaussianMixture`` (same regulariser ``reg`` on the covariance
diagonal, same ML estimates): k-means++ seeding plus a few Lloyd iterations, hard
initial responsibilities, log-sum-exp E-steps with Cholesky log-densities
(:mod:`.gmm_density`), and re-seeding of components that own less than one
patch's worth of responsibility (scikit-learn lets them die). Slides are a
zero-padded batch ``(S, N, D)`` with a mask of valid rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from fedpath.mil.gmm_density import Covariance, eye_like, log_gauss, precision_factors


def _m_step(
    x: Tensor, resp: Tensor, kind: Covariance, reg: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """ML weights, means, covariances (+ ``reg`` on the diagonal) and counts."""
    nk = resp.sum(1) + 10 * torch.finfo(x.dtype).eps  # (S, M)
    means = resp.transpose(1, 2) @ x / nk[..., None]  # (S, M, D)
    if kind == "diag":
        var = resp.transpose(1, 2) @ (x * x) / nk[..., None] - means.square()
        covs = var.clamp_min(0.0) + reg
    else:
        covs_m = []
        for m in range(means.shape[1]):
            y = (x - means[:, m : m + 1]) * resp[:, :, m : m + 1].sqrt()
            covs_m.append(y.transpose(1, 2) @ y / nk[:, m, None, None])
        covs = torch.stack(covs_m, dim=1) + reg * eye_like(covs_m[0])
    weights = nk / nk.sum(1, keepdim=True)
    return weights, means, covs, nk


def _reseed(
    x: Tensor,
    mask: Tensor,
    badness: Tensor,
    params: tuple[Tensor, Tensor, Tensor, Tensor],
    kind: Covariance,
    reg: float,
) -> tuple[tuple[Tensor, Tensor, Tensor], Tensor]:
    """Move components owning < 1 patch onto the worst-explained patches.

    The new component gets weight ``1/N`` and the slide's per-dimension
    variance (diagonal), broad enough to win patches back.
    """
    weights, means, covs, nk = params
    empty = nk < 1.0
    if not bool(empty.any()):
        return (weights, means, covs), empty.any(1)
    weights, means, covs = weights.clone(), means.clone(), covs.clone()
    for s in torch.nonzero(empty.any(1)).flatten().tolist():
        xs = x[s, mask[s]]
        var = xs.var(0, unbiased=False) + reg
        comps = torch.nonzero(empty[s]).flatten()
        worst = torch.topk(badness[s].masked_fill(~mask[s], -math.inf), len(comps))
        for m, i in zip(comps.tolist(), worst.indices.tolist(), strict=True):
            means[s, m] = x[s, i]
            covs[s, m] = torch.diag(var) if kind == "full" else var
            weights[s, m] = 1.0 / xs.shape[0]
        weights[s] = weights[s] / weights[s].sum()
    return (weights, means, covs), empty.any(1)


def _kmeans_init(
    x: Tensor,
    mask: Tensor,
    k: int,
    gens: Sequence[torch.Generator],
    iters: int,
    init_means: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """Greedy k-means++ seeds (or ``init_means``) then Lloyd; one-hot resp, d^2."""
    s_count, _, _ = x.shape
    if init_means is not None:
        centres = init_means.to(x).clone()  # (S, M, D)
    else:
        rows = []
        for s in range(s_count):
            xs = x[s, mask[s]]
            first = torch.randint(
                xs.shape[0], (1,), generator=gens[s], device=xs.device
            )
            chosen = [xs[first[0]]]
            d2 = (xs - chosen[0]).square().sum(1)
            trials = 2 + int(math.log(k))  # greedy k-means++, as scikit-learn
            for _ in range(1, k):  # candidates drawn proportional to d^2
                p = d2.double()
                p = p if float(p.sum()) > 0 else torch.ones_like(p)
                cand = torch.multinomial(p, trials, True, generator=gens[s])
                new_d2 = torch.minimum(d2, torch.cdist(xs[cand], xs).square())
                best = int(new_d2.sum(1).argmin())  # keep the lowest potential
                chosen.append(xs[cand[best]])
                d2 = new_d2[best]
            rows.append(torch.stack(chosen))
        centres = torch.stack(rows)
    for it in range(iters + 1):
        d2 = (
            x.square().sum(-1, keepdim=True)
            - 2.0 * x @ centres.transpose(1, 2)
            + centres.square().sum(-1)[:, None, :]
        ).clamp_min(0.0)
        dist, assign = d2.min(-1)
        onehot = torch.nn.functional.one_hot(assign, k).to(x.dtype) * mask[..., None]
        if it == iters:
            return onehot, dist
        count = onehot.sum(1)
        new = onehot.transpose(1, 2) @ x / count.clamp_min(1.0)[..., None]
        centres = torch.where(count[..., None] > 0, new, centres)  # empty: stay
    raise AssertionError("unreachable")


class EMSettings(NamedTuple):
    """The fit's options, as :func:`~fedpath.mil.gmm.fit_gmm` documents them."""

    kind: Covariance
    iters: int
    tol: float
    reg: float
    kmeans_iters: int


def run_em(
    x: Tensor,
    mask: Tensor,
    k: int,
    opt: EMSettings,
    gens: Sequence[torch.Generator],
    init_means: Tensor | None,
) -> tuple[Tensor, ...]:
    """EM on a padded batch ``x`` (S, N, D) with valid rows ``mask`` (S, N).

    Converged slides are frozen (their parameters no longer change) while the
    others continue, so a slide's result is independent of its batch-mates.
    """
    kind, iters, tol, reg, kmeans_iters = opt
    n_valid = mask.sum(1).to(x.dtype)
    resp, dist = _kmeans_init(x, mask, k, gens, kmeans_iters, init_means)
    (w, mu, cov), _ = _reseed(x, mask, dist, _m_step(x, resp, kind, reg), kind, reg)
    prev = torch.full_like(n_valid, -math.inf)
    done = torch.zeros_like(mask[:, 0])
    n_iter = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    for it in range(iters + 1):
        prec, half = precision_factors(cov, kind)
        logp = (
            log_gauss(x, mu, prec, half, kind) + torch.log(w.clamp_min(1e-30))[:, None]
        )
        lnorm = torch.logsumexp(logp, dim=-1)
        ll = (lnorm * mask).sum(1) / n_valid
        resp = torch.exp(logp - lnorm[..., None]) * mask[..., None]
        # relative tolerance: the mean log-density grows with D (about -1.4 D)
        done = done | ((ll - prev).abs() < tol * ll.abs().clamp_min(1.0))
        if it == iters or bool(done.all()):
            break
        (w2, mu2, cov2), reseeded = _reseed(
            x, mask, -lnorm, _m_step(x, resp, kind, reg), kind, reg
        )
        keep = done.view(-1, 1)
        w = torch.where(keep, w, w2)
        mu = torch.where(keep[..., None], mu, mu2)
        cov = torch.where(keep.view((-1,) + (1,) * (cov.ndim - 1)), cov, cov2)
        n_iter += (~done).long()
        prev = torch.where(reseeded, -math.inf, ll)  # a re-seed jumps: no test
    return w, mu, cov, resp, ll, n_iter, done
