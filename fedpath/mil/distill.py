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
from typing import Literal

import torch
from torch import Tensor

from fedpath.mil.alignment import (
    Weighting,
    allocate_tokens,
    group_terms,
    single_gaussian,
    token_weights,
)
from fedpath.mil.bags import SlideBag
from fedpath.mil.gmm import GMM, Covariance, fit_gmm, fit_gmms

Mode = Literal["gmm", "single", "mean"]
Init = Literal["auto", "gmm", "random"]


@dataclass
class DistillResult:
    """Synthetic tokens (T, D), their final assignment (T,), the loss per
    iteration (before each step, plus the final value) and the target GMM."""

    tokens: Tensor
    assignment: Tensor
    losses: list[float]
    target: GMM


@dataclass(frozen=True)
class DistillOptions:
    """How slides are distilled (module docstring); defaults are FedHD's.

    ``components``: ``M`` of the real slide's GMM (mode ``"gmm"``); ``covariance``:
    ``"full"`` or ``"diag"``; ``tokens``: ``T`` per synthetic slide; ``iters``:
    Adam steps at learning rate ``lr`` (relative to the slide's feature scale,
    cosine decay); ``mode``: ``"gmm"`` (FedHD), ``"single"`` (one Gaussian) or
    ``"mean"`` (mean matching only); ``init``: ``"auto"`` (``"random"`` for
    ``mode="mean"``, else ``"gmm"``), ``"gmm"`` or ``"random"``;
    ``reassign_every``: iterations between token reassignments (0: fixed);
    ``weighting``: of the component terms (:func:`alignment_loss`); ``reg``: added
    to the fitted covariances' diagonal.
    """

    components: int = 16
    covariance: Covariance = "full"
    tokens: int = 1000
    iters: int = 1000
    lr: float = 0.05
    mode: Mode = "gmm"
    init: Init = "auto"
    reassign_every: int = 0
    weighting: Weighting = "uniform"
    reg: float = 1e-4

    def __post_init__(self) -> None:
        if self.tokens < 1 or self.iters < 0 or self.lr <= 0:
            raise ValueError(
                f"need tokens >= 1, iters >= 0, lr > 0; got {self.tokens}, "
                f"{self.iters}, {self.lr}"
            )
        if self.mode not in ("gmm", "single", "mean"):
            raise ValueError(
                f"mode must be 'gmm', 'single' or 'mean', got {self.mode!r}"
            )


def _target(
    x: Tensor, gmm: GMM | None, o: DistillOptions, seed: int, name: str | None
) -> GMM:
    if gmm is None:
        if o.mode == "gmm":
            return fit_gmm(
                x, o.components, o.covariance, reg=o.reg, seed=seed, name=name
            )
        return single_gaussian(x, o.reg, diag=o.covariance == "diag")
    if o.mode != "gmm" and gmm.num_components != 1:
        raise ValueError(
            f"mode {o.mode!r} needs a one-component gmm, got {gmm.num_components}"
        )
    return gmm


def _optimise(
    xs: Sequence[Tensor],
    gmms: Sequence[GMM],
    seeds: Sequence[int],
    o: DistillOptions,
) -> list[DistillResult]:
    """Distil slides with equally many components together (module docstring)."""
    tokens, iters, mode, reassign_every = o.tokens, o.iters, o.mode, o.reassign_every
    s_count, m_count, kind = len(xs), gmms[0].num_components, gmms[0].covariance
    centre = torch.stack([x.mean(0) for x in xs])[:, None]  # (S, 1, D)
    scale = torch.stack([x.var(0, unbiased=False).mean().sqrt() for x in xs])
    scale = scale.clamp_min(1e-6)[:, None, None]
    start = ("random" if mode == "mean" else "gmm") if o.init == "auto" else o.init
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
    opt = torch.optim.Adam([u], lr=o.lr)
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
        terms, counts = group_terms(
            tok.flatten(0, 1), (assign + offset).flatten(), means, covs, kind,
            mode != "mean", sq,
        )  # fmt: skip
        weight = token_weights(counts, o.weighting, tokens).to(terms)
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
    options: DistillOptions = DistillOptions(),
    *,
    gmm: GMM | None = None,
    seed: int = 0,
    name: str | None = None,
) -> DistillResult:
    """Distil one slide's patch embeddings ``x`` (K, D) into ``tokens`` (T, D).

    See the module docstring for the objective and :class:`DistillOptions` for
    the settings. ``gmm`` is the real slide's fitted mixture (fitted here when
    ``None``, named ``name`` in its errors; in modes ``"single"`` and ``"mean"``
    it must have one component). Deterministic in ``seed``.
    """
    x = x.to(torch.float32)
    g = _target(x, gmm, options, seed, name)
    return _optimise([x], [g], [seed], options)[0]


def distill_slide(
    bag: SlideBag,
    options: DistillOptions = DistillOptions(),
    *,
    gmm: GMM | None = None,
    seed: int = 0,
) -> SlideBag:
    """One real slide -> its synthetic slide (same label and domain).

    The id is ``<slide_id>-syn``; see :func:`distill_features`.
    """
    res = distill_features(bag.features, options, gmm=gmm, seed=seed, name=bag.slide_id)
    return SlideBag(f"{bag.slide_id}-syn", res.tokens, bag.label, bag.domain)


def _batched(
    xs: Sequence[Tensor],
    gmms: Sequence[GMM],
    seeds: Sequence[int],
    batch_size: int | None,
    options: DistillOptions,
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
                options,
            )  # fmt: skip
            for i, r in zip(idx, res, strict=True):
                out[i] = r
    return [r for r in out if r is not None]


def distill_slides(
    bags: Sequence[SlideBag],
    options: DistillOptions = DistillOptions(),
    *,
    seed: int = 0,
    batch_size: int | None = None,
    too_few: Literal["error", "reduce"] = "error",
) -> list[SlideBag]:
    """One-to-one distillation of a client's slides (FedHD design point 2).

    Slide ``i``'s mixture is fitted and its tokens are drawn from seed
    ``seed + i``; mixtures are fitted in batches (:func:`fit_gmms`, ``too_few``:
    what a slide with fewer patches than components does) and slides are
    distilled in batches of ``batch_size`` slides (default: by memory, 64 for
    small ``D``, 1 for ``D = 1024``) with the same result as
    :func:`distill_slide` one by one.
    """
    o = options
    xs = [b.features.to(torch.float32) for b in bags]
    seeds = [seed + i for i in range(len(bags))]
    if o.mode == "gmm":
        names = [b.slide_id for b in bags]
        gmms = fit_gmms(
            xs, o.components, o.covariance, reg=o.reg, seed=seeds, names=names,
            too_few=too_few,
        )  # fmt: skip
    else:
        gmms = [_target(x, None, o, seed, None) for x in xs]
    res = _batched(xs, gmms, seeds, batch_size, o)
    return [
        SlideBag(f"{b.slide_id}-syn", r.tokens, b.label, b.domain)
        for b, r in zip(bags, res, strict=True)
    ]


def compress_slides(
    bags: Sequence[SlideBag],
    per_class: int,
    options: DistillOptions = DistillOptions(),
    *,
    seed: int = 0,
    max_pool_patches: int | None = 50_000,
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
    o = options
    domain = "+".join(sorted({b.domain for b in bags}))
    out = []
    for label in sorted({b.label for b in bags}):
        pool = torch.cat([b.features for b in bags if b.label == label]).float()
        if o.mode == "gmm":
            g = fit_gmm(
                pool, o.components, o.covariance, reg=o.reg, seed=seed,
                max_patches=max_pool_patches, name=f"{domain} class {label}",
            )  # fmt: skip
        else:
            g = single_gaussian(pool, o.reg, diag=o.covariance == "diag")
        seeds = [seed + i for i in range(per_class)]
        res = _batched([pool] * per_class, [g] * per_class, seeds, batch_size, o)
        out += [
            SlideBag(f"{domain}-class{label}-syn{i}", r.tokens, label, domain)
            for i, r in enumerate(res)
        ]
    return out
