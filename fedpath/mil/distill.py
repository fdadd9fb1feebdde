r"""FedHD's one-to-one slide distillation by Gaussian-mixture feature alignment.

FedHD (design points 1-2): every real slide :math:`x_i` (``K`` patch embeddings)
gets one synthetic slide :math:`h_i` of ``T`` learnable embeddings. The real
slide's patches are summarised by a GMM :math:`\{\pi_m, \mu_m, \Sigma_m\}`
(:mod:`fedpath.mil.gmm`); the synthetic tokens are assigned to its components
and their per-component means and covariances :math:`\hat\mu_m, \hat\Sigma_m`
are pulled onto the real ones:

.. math:: \mathcal L_{align} = \sum_m \lVert\mu_m - \hat\mu_m\rVert_2^2
          + \lVert\Sigma_m - \hat\Sigma_m\rVert_F^2

Decisions the paper leaves open (documented defaults, each an option):

- **Init** (``init="gmm"``): ``T`` is apportioned to the components in
  proportion to :math:`\pi_m` (two tokens each when ``T >= 2M``, so a rare
  component is never left without tokens, the rest by largest remainder) and the
  tokens are drawn from their component. ``init="random"`` draws
  :math:`N(0, s^2 I)` with ``s^2`` the slide's mean per-dimension variance
  (FedWSIDD's noise initialisation, scale-matched); it is the default of the
  mean-matching ablation, whose loss cannot shape covariances.
- **Assignment**: token ``j`` belongs to the component of highest
  responsibility under the real slide's GMM (hard assignment, as the paper's
  "assigned to components by the same GMM"). It is computed at the start and
  recomputed every ``reassign_every`` iterations (0 = fixed). Components
  without tokens drop out of the sum.
- :math:`\hat\Sigma_m` is the ML (divide-by-``n``) covariance, like the GMM's.
  The tokens are parametrised as ``centre + scale * u`` with ``u`` optimised
  by Adam, so ``lr`` is relative to the slide's feature scale; the learning
  rate follows a cosine decay so the last iterations settle.
- Ablations (paper Table "ablation"): ``mode="single"`` is ``M = 1`` (one
  Gaussian, mean and covariance); ``mode="mean"`` matches only the slide mean
  (FedWSIDD's distribution matching); :func:`compress_slides` is the
  many-to-one variant.

The covariance term is :math:`\lVert\Sigma\rVert_F^2 - \frac2n\sum(Y\Sigma)
\odot Y + \lVert YY^\top\rVert_F^2/n^2` (``Y`` the centred tokens): no ``D x D``
matrix per component. Slides are distilled in batches (:func:`distill_slides`);
Adam is elementwise, so optimising the sum of the slides' losses equals
optimising each alone: a slide's result does not depend on its batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from fedpath.mil.bags import SlideBag
from fedpath.mil.gmm import GMM, Covariance, fit_gmm, fit_gmms

Mode = Literal["gmm", "single", "mean"]
Init = Literal["auto", "gmm", "random"]
Weighting = Literal["uniform", "assigned"]


@dataclass
class DistillResult:
    """Synthetic tokens (T, D), their final assignment (T,), the loss per
    iteration (before each step, plus the final value) and the target GMM."""

    tokens: Tensor
    assignment: Tensor
    losses: list[float]
    target: GMM


def allocate_tokens(weights: Tensor, tokens: int, minimum: int = 2) -> Tensor:
    """Split ``tokens`` over components in proportion to ``weights``.

    Every component first gets ``minimum`` tokens (lowered to ``tokens // M``
    when there are too few), the rest is apportioned in proportion to the
    weights by largest remainders. Sums to ``tokens`` exactly.
    """
    m = weights.shape[0]
    floor_each = min(minimum, tokens // m)
    rest = tokens - floor_each * m
    w = weights.double().cpu().clamp_min(0)
    share = w / w.sum() * rest
    counts = share.floor().long()
    short = rest - int(counts.sum())
    if short > 0:
        counts[torch.topk(share - counts, short).indices] += 1
    return counts + floor_each


def single_gaussian(x: Tensor, reg: float = 1e-4, diag: bool = False) -> GMM:
    """The ML one-component GMM of ``x`` (the fixed point of EM for ``M = 1``)."""
    x64 = x.double()
    y = x64 - x64.mean(0)
    if diag:
        cov = (y.square().mean(0) + reg)[None]
    else:
        eye = torch.eye(x.shape[1], dtype=x64.dtype, device=x.device)
        cov = (y.T @ y / x.shape[0] + reg * eye)[None]
    kind: Covariance = "diag" if diag else "full"
    g = GMM(x.new_ones(1), x64.mean(0)[None].to(x), cov.to(x), kind)
    g.resp = x.new_ones(x.shape[0], 1)
    g.log_likelihood = float(g.score_samples(x).mean())
    return g


def _group_terms(
    tokens: Tensor,
    group: Tensor,
    means: Tensor,
    covs: Tensor,
    kind: Covariance,
    covariance_term: bool,
    sq: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """Per group (component): mean term (+ covariance term) and token count."""
    counts = torch.bincount(group, minlength=means.shape[0])
    n = counts.clamp_min(1).to(tokens.dtype)
    means, covs = means.to(tokens.dtype), covs.to(tokens.dtype)
    mu_hat = tokens.new_zeros(means.shape).index_add(0, group, tokens) / n[:, None]
    terms = (means - mu_hat).square().sum(1)
    if covariance_term:
        yc = tokens - mu_hat[group]
        if kind == "diag":
            var_hat = torch.zeros_like(mu_hat).index_add(0, group, yc.square())
            terms = terms + (covs - var_hat / n[:, None]).square().sum(1)
        else:
            if sq is None:
                sq = covs.double().square().flatten(1).sum(1)
            cross, gram = _cov_products(yc, group, counts, covs)
            terms = terms + sq.to(terms) - 2.0 * cross / n + gram / n**2
    return terms, counts


def _weights(counts: Tensor, weighting: Weighting, t_count: int) -> Tensor:
    if weighting == "assigned":
        return counts.float() / t_count
    return (counts > 0).float()  # components without tokens drop out


def alignment_loss(
    tokens: Tensor,
    assignment: Tensor,
    target: GMM,
    covariance_term: bool = True,
    weighting: Weighting = "uniform",
    cov_sq_norms: Tensor | None = None,
) -> Tensor:
    r"""FedHD's :math:`\mathcal L_{align}` of tokens assigned to ``target``'s
    components (paper, design point 1).

    ``weighting="uniform"`` is the paper's plain sum over components (a rare
    component weighs as much as a common one); ``"assigned"`` weights each term
    by the share of tokens assigned to it. ``covariance_term=False`` keeps only
    the mean terms. ``cov_sq_norms`` (M,) caches :math:`\lVert\Sigma_m\rVert_F^2`.
    """
    terms, counts = _group_terms(
        tokens, assignment, target.means, target.covs, target.covariance,
        covariance_term, cov_sq_norms,
    )  # fmt: skip
    return (terms * _weights(counts, weighting, tokens.shape[0]).to(terms)).sum()


class _SymmetricQuadratic(torch.autograd.Function):
    """``sum((Y C) * Y)`` over the last two axes, for a constant symmetric ``C``.

    Its gradient is ``2 Y C``, the product already formed in the forward pass,
    so the backward needs no second ``(n, D) x (D, D)`` product (autograd would
    redo one): half the matrix work of a distillation step at large ``D``.
    """

    @staticmethod
    def forward(ctx: Any, y: Tensor, c: Tensor) -> Tensor:
        p = y @ c
        ctx.save_for_backward(p)
        return (p * y).sum((-2, -1))

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (p,) = ctx.saved_tensors
        return 2.0 * p * grad[..., None, None], None


def _cov_products(
    yc: Tensor, group: Tensor, counts: Tensor, covs: Tensor
) -> tuple[Tensor, Tensor]:
    r"""Per group, :math:`\sum_i y_i^\top\Sigma_m y_i` and
    :math:`\lVert Y_m^\top Y_m\rVert_F^2` of the centred tokens ``yc``.

    Groups are zero-padded to a batch (few large kernels) unless padding
    would more than double the ``(n, D) x (D, D)`` work of a large ``D``; then
    a loop over contiguous slices of the sorted tokens.
    """
    m_count, (t_count, dim) = counts.shape[0], yc.shape
    order = torch.argsort(group, stable=True)
    seg, ys = group[order], yc[order]
    starts = torch.cumsum(counts, 0) - counts
    n_max = int(counts.max())
    if dim <= 128 or m_count * n_max <= 2 * t_count:
        pos = torch.arange(t_count, device=yc.device) - starts[seg]
        yp = yc.new_zeros(m_count, n_max, dim).index_put((seg, pos), ys)
        small = yp @ yp.transpose(1, 2) if n_max < dim else yp.transpose(1, 2) @ yp
        return _SymmetricQuadratic.apply(yp, covs), small.square().sum((1, 2))
    cross_l, gram_l = [], []
    for m, (a, c) in enumerate(zip(starts.tolist(), counts.tolist(), strict=True)):
        y = ys[a : a + c]
        cross_l.append(_SymmetricQuadratic.apply(y, covs[m]))
        small = y @ y.T if c < dim else y.T @ y
        gram_l.append(small.square().sum())
    return torch.stack(cross_l), torch.stack(gram_l)


def _target(
    x: Tensor,
    gmm: GMM | None,
    mode: Mode,
    components: int,
    covariance: Covariance,
    reg: float,
    seed: int,
    name: str | None,
) -> GMM:
    if mode not in ("gmm", "single", "mean"):
        raise ValueError(f"mode must be 'gmm', 'single' or 'mean', got {mode!r}")
    if gmm is None:
        if mode == "gmm":
            return fit_gmm(x, components, covariance, reg=reg, seed=seed, name=name)
        return single_gaussian(x, reg, diag=covariance == "diag")
    if mode != "gmm" and gmm.num_components != 1:
        raise ValueError(
            f"mode {mode!r} needs a one-component gmm, got {gmm.num_components}"
        )
    return gmm


def _optimise(
    xs: Sequence[Tensor],
    gmms: Sequence[GMM],
    seeds: Sequence[int],
    tokens: int,
    iters: int,
    lr: float,
    mode: Mode,
    init: Init,
    reassign_every: int,
    weighting: Weighting,
) -> list[DistillResult]:
    """Distil slides with equally many components together (module docstring)."""
    if tokens < 1 or iters < 0 or lr <= 0:
        raise ValueError(
            f"need tokens >= 1, iters >= 0, lr > 0; got {tokens}, {iters}, {lr}"
        )
    s_count, m_count, kind = len(xs), gmms[0].num_components, gmms[0].covariance
    centre = torch.stack([x.mean(0) for x in xs])[:, None]  # (S, 1, D)
    scale = torch.stack([x.var(0, unbiased=False).mean().sqrt() for x in xs])
    scale = scale.clamp_min(1e-6)[:, None, None]
    start = ("random" if mode == "mean" else "gmm") if init == "auto" else init
    first = []
    for x, g, seed in zip(xs, gmms, seeds, strict=True):
        gen = torch.Generator().manual_seed(seed)
        if start == "gmm":
            first.append(g.sample(allocate_tokens(g.weights, tokens), gen).to(x))
        else:
            first.append(torch.randn(tokens, x.shape[1], generator=gen).to(x))
    init_tokens = torch.stack(first)
    if start != "gmm":
        init_tokens = init_tokens * scale
    u = ((init_tokens - centre) / scale).requires_grad_(True)
    opt = torch.optim.Adam([u], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: 0.5 * (1 + math.cos(math.pi * t / max(iters, 1)))
    )
    means = torch.cat([g.means for g in gmms]).to(init_tokens)
    covs = torch.cat([g.covs for g in gmms]).to(init_tokens)
    sq = torch.cat([g.covs.double().square().flatten(1).sum(1) for g in gmms])
    offset = torch.arange(s_count, device=u.device)[:, None] * m_count
    assign = torch.stack([g.predict(t) for g, t in zip(gmms, init_tokens, strict=True)])
    history: list[list[float]] = []
    for it in range(iters + 1):
        tok = centre + scale * u
        if reassign_every > 0 and it > 0 and it % reassign_every == 0:
            with torch.no_grad():
                assign = torch.stack(
                    [g.predict(t) for g, t in zip(gmms, tok, strict=True)]
                )
        terms, counts = _group_terms(
            tok.flatten(0, 1), (assign + offset).flatten(), means, covs, kind,
            mode != "mean", sq,
        )  # fmt: skip
        weight = _weights(counts, weighting, tokens).to(terms)
        per_slide = (terms * weight).view(s_count, m_count).sum(1)
        history.append(per_slide.detach().tolist())
        if it == iters:
            break
        opt.zero_grad(set_to_none=True)
        per_slide.sum().backward()  # independent per slide (Adam is elementwise)
        opt.step()
        sched.step()
    tok = tok.detach()
    return [
        DistillResult(tok[i], assign[i], [h[i] for h in history], gmms[i])
        for i in range(s_count)
    ]


def distill_features(
    x: Tensor,
    gmm: GMM | None = None,
    components: int = 16,
    covariance: Covariance = "full",
    tokens: int = 1000,
    iters: int = 1000,
    lr: float = 0.05,
    mode: Mode = "gmm",
    seed: int = 0,
    *,
    init: Init = "auto",
    reassign_every: int = 0,
    weighting: Weighting = "uniform",
    reg: float = 1e-4,
    name: str | None = None,
) -> DistillResult:
    """Distil one slide's patch embeddings ``x`` (K, D) into ``tokens`` (T, D).

    See the module docstring for the objective and the defaults. ``gmm`` is
    the real slide's fitted mixture (fitted here when ``None``; in modes
    ``"single"`` and ``"mean"`` it must have one component). Deterministic in
    ``seed``.
    """
    x = x.to(torch.float32)
    g = _target(x, gmm, mode, components, covariance, reg, seed, name)
    return _optimise(
        [x], [g], [seed], tokens, iters, lr, mode, init, reassign_every, weighting
    )[0]


def distill_slide(
    bag: SlideBag,
    gmm: GMM | None = None,
    components: int = 16,
    covariance: Covariance = "full",
    tokens: int = 1000,
    iters: int = 1000,
    lr: float = 0.05,
    mode: Mode = "gmm",
    seed: int = 0,
    **kwargs: Any,
) -> SlideBag:
    """One real slide -> its synthetic slide (same label and domain).

    The id is ``<slide_id>-syn``; ``kwargs`` go to :func:`distill_features`.
    """
    res = distill_features(
        bag.features, gmm, components, covariance, tokens, iters, lr, mode, seed,
        name=bag.slide_id, **kwargs,
    )  # fmt: skip
    return SlideBag(f"{bag.slide_id}-syn", res.tokens, bag.label, bag.domain)


def _batched(
    xs: Sequence[Tensor],
    gmms: Sequence[GMM],
    seeds: Sequence[int],
    batch_size: int | None,
    opts: dict[str, Any],
) -> list[DistillResult]:
    """Run :func:`_optimise` over batches of slides with equal ``M``."""
    d, m = xs[0].shape[1], max(g.num_components for g in gmms)
    if batch_size is None:  # about 256 MiB of target covariances and copies
        batch_size = int(min(64, max(1, 2**28 // (12 * m * d * d))))
    out: list[DistillResult | None] = [None] * len(xs)
    for k in sorted({g.num_components for g in gmms}):
        todo = [i for i, g in enumerate(gmms) if g.num_components == k]
        for b in range(0, len(todo), batch_size):
            idx = todo[b : b + batch_size]
            res = _optimise(
                [xs[i] for i in idx], [gmms[i] for i in idx], [seeds[i] for i in idx],
                **opts,
            )  # fmt: skip
            for i, r in zip(idx, res, strict=True):
                out[i] = r
    return [r for r in out if r is not None]


def distill_slides(
    bags: Sequence[SlideBag],
    components: int = 16,
    covariance: Covariance = "full",
    tokens: int = 1000,
    iters: int = 1000,
    lr: float = 0.05,
    mode: Mode = "gmm",
    seed: int = 0,
    *,
    init: Init = "auto",
    reassign_every: int = 0,
    weighting: Weighting = "uniform",
    reg: float = 1e-4,
    batch_size: int | None = None,
    too_few: Literal["error", "reduce"] = "error",
) -> list[SlideBag]:
    """One-to-one distillation of a client's slides (FedHD design point 2).

    Slide ``i``'s mixture is fitted and its tokens are drawn from seed
    ``seed + i``; mixtures are fitted in batches (:func:`fit_gmms`) and
    slides are distilled in batches of ``batch_size``
    slides (default: by memory, 64 for small ``D``, 1 for ``D = 1024``) with
    the same result as :func:`distill_slide` one by one.
    """
    xs = [b.features.to(torch.float32) for b in bags]
    seeds = [seed + i for i in range(len(bags))]
    if mode == "gmm":
        names = [b.slide_id for b in bags]
        gmms = fit_gmms(
            xs, components, covariance, reg=reg, seed=seeds, names=names,
            too_few=too_few,
        )  # fmt: skip
    else:
        gmms = [_target(x, None, mode, 1, covariance, reg, seed, None) for x in xs]
    opts = {
        "tokens": tokens, "iters": iters, "lr": lr, "mode": mode, "init": init,
        "reassign_every": reassign_every, "weighting": weighting,
    }  # fmt: skip
    res = _batched(xs, gmms, seeds, batch_size, opts)
    return [
        SlideBag(f"{b.slide_id}-syn", r.tokens, b.label, b.domain)
        for b, r in zip(bags, res, strict=True)
    ]


def compress_slides(
    bags: Sequence[SlideBag],
    per_class: int,
    components: int = 16,
    covariance: Covariance = "full",
    tokens: int = 1000,
    iters: int = 1000,
    lr: float = 0.05,
    mode: Mode = "gmm",
    seed: int = 0,
    *,
    max_pool_patches: int | None = 50_000,
    reg: float = 1e-4,
    batch_size: int | None = None,
) -> list[SlideBag]:
    """Many-to-one ablation: pool each class's slides, distil ``per_class`` slides.

    The pooled patches (a seeded subsample of ``max_pool_patches`` for the
    GMM fit) give one mixture per class; synthetic slide ``i`` aligns to it
    from seed ``seed + i``. Ids: ``<domain>-class<label>-syn<i>``; the domain
    is the bags' common domain, or the sorted domains joined by ``+``.
    """
    if per_class < 1:
        raise ValueError(f"per_class must be >= 1, got {per_class}")
    domain = "+".join(sorted({b.domain for b in bags}))
    opts = {
        "tokens": tokens, "iters": iters, "lr": lr, "mode": mode, "init": "auto",
        "reassign_every": 0, "weighting": "uniform",
    }  # fmt: skip
    out = []
    for label in sorted({b.label for b in bags}):
        pool = torch.cat([b.features for b in bags if b.label == label]).float()
        if mode == "gmm":
            g = fit_gmm(
                pool, components, covariance, reg=reg, seed=seed,
                max_patches=max_pool_patches, name=f"{domain} class {label}",
            )  # fmt: skip
        else:
            g = single_gaussian(pool, reg, diag=covariance == "diag")
        seeds = [seed + i for i in range(per_class)]
        res = _batched([pool] * per_class, [g] * per_class, seeds, batch_size, opts)
        out += [
            SlideBag(f"{domain}-class{label}-syn{i}", r.tokens, label, domain)
            for i, r in enumerate(res)
        ]
    return out
