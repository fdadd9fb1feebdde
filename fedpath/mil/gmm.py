r"""Gaussian mixtures of a slide's patch embeddings, fitted by EM in torch.

FedHD (design point 1) models the patch features of every real slide as
:math:`P \approx \sum_{m=1}^{M} \pi_m \mathcal N(\mu_m, \Sigma_m)` with
:math:`M = 16` full covariances. :func:`fit_gmm` fits one slide,
:func:`fit_gmms` many at once (slides are batched, which is what makes the
small-``D`` case fast; a slide's result does not depend on its batch).

EM as in scikit-learn's ``GaussianMixture`` (same regulariser ``reg`` on the
covariance diagonal, same ML estimates): k-means++ seeding plus a few Lloyd
iterations, hard initial responsibilities, log-sum-exp E-steps with Cholesky
log-densities, and re-seeding of components that own less than one patch's
worth of responsibility (scikit-learn lets them die). Fits run in float32 on
mean-centred data; covariances are kept as ``(M, D, D)`` (64 MiB for
``M = 16, D = 1024``) and nothing of size ``(N, M, D)`` or ``(M, D, D)`` per
patch is formed: the E-step loops over components, each a
``(N, D) x (D, D)`` product with the inverse Cholesky factor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import torch
from torch import Tensor

Covariance = Literal["full", "diag"]
_LOG_2PI = math.log(2 * math.pi)


@dataclass
class GMM:
    """A fitted mixture: ``weights`` (M,), ``means`` (M, D), ``covs`` (M, D, D)
    for ``"full"`` or (M, D) variances for ``"diag"``.

    ``resp`` (N, M) are the fitted patches' responsibilities and
    ``log_likelihood`` their mean log-density under the returned parameters.
    """

    weights: Tensor
    means: Tensor
    covs: Tensor
    covariance: Covariance
    resp: Tensor | None = None
    log_likelihood: float = float("nan")
    n_iter: int = 0
    converged: bool = False
    _factors: tuple[Tensor, Tensor] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def num_components(self) -> int:
        return int(self.weights.shape[0])

    @property
    def dim(self) -> int:
        return int(self.means.shape[1])

    def factors(self) -> tuple[Tensor, Tensor]:
        """(inverse Cholesky factor transposed, half log-determinant), cached."""
        if self._factors is None:
            prec, half = _precision_factors(self.covs[None], self.covariance)
            self._factors = (prec[0], half[0])
        return self._factors

    def log_prob_components(self, x: Tensor) -> Tensor:
        r"""``(N, M)``: :math:`\log\pi_m + \log\mathcal N(x_n; \mu_m, \Sigma_m)`."""
        prec, half = self.factors()
        x = x.to(self.means.dtype)
        logn = _log_gauss(
            x[None], self.means[None], prec[None], half[None], self.covariance
        )
        return logn[0] + torch.log(self.weights.clamp_min(1e-30))

    def score_samples(self, x: Tensor) -> Tensor:
        """``(N,)`` log-density of each row of ``x``."""
        return torch.logsumexp(self.log_prob_components(x), dim=1)

    def responsibilities(self, x: Tensor) -> Tensor:
        """``(N, M)`` posterior component probabilities of each row of ``x``."""
        return torch.softmax(self.log_prob_components(x), dim=1)

    def predict(self, x: Tensor) -> Tensor:
        """``(N,)`` most responsible component of each row (hard assignment)."""
        return self.log_prob_components(x).argmax(dim=1)

    def sample(
        self, counts: Tensor, generator: torch.Generator | None = None
    ) -> Tensor:
        """``counts[m]`` draws from component ``m``, stacked in component order."""
        out = []
        for m, c in enumerate(counts.tolist()):
            eps = torch.randn(int(c), self.dim, generator=generator)  # CPU draws
            eps = eps.to(self.means)
            if self.covariance == "full":
                chol = torch.linalg.cholesky(self.covs[m].double()).to(eps.dtype)
                eps = eps @ chol.T
            else:
                eps = eps * self.covs[m].sqrt()
            out.append(self.means[m] + eps)
        return torch.cat(out)


def _eye_like(cov: Tensor) -> Tensor:
    return torch.eye(cov.shape[-1], dtype=cov.dtype, device=cov.device)


def _precision_factors(covs: Tensor, kind: Covariance) -> tuple[Tensor, Tensor]:
    """Per component: ``P = L^{-T}`` (so ``|(x - mu) P|^2`` is the Mahalanobis
    distance) and ``sum(log diag L)``; diag: ``1/sigma`` and ``sum(log sigma)``.

    A covariance whose float32 Cholesky fails (numerically singular despite
    ``reg``, e.g. features of a large scale) is factorised again in float64
    with a jitter of 1e-6 of its mean variance.
    """
    if kind == "diag":
        std = covs.sqrt()
        return 1.0 / std, torch.log(std).sum(-1)
    chol, info = torch.linalg.cholesky_ex(covs)
    if bool((info > 0).any()):
        c64 = covs[info > 0].double()
        jitter = 1e-6 * c64.diagonal(dim1=-2, dim2=-1).mean(-1)[:, None, None]
        chol = chol.clone()
        chol[info > 0] = torch.linalg.cholesky(c64 + jitter * _eye_like(c64)).to(chol)
    inv = torch.linalg.solve_triangular(
        chol, _eye_like(chol).expand_as(chol), upper=False
    )
    half = torch.log(chol.diagonal(dim1=-2, dim2=-1)).sum(-1)
    return inv.transpose(-1, -2), half


def _log_gauss(
    x: Tensor, means: Tensor, prec: Tensor, half: Tensor, kind: Covariance
) -> Tensor:
    """``(S, N, M)`` Gaussian log-densities of ``x`` (S, N, D) for each component."""
    d = x.shape[-1]
    if kind == "diag":
        p2 = prec * prec  # (S, M, D)
        maha = (
            (x * x) @ p2.transpose(1, 2)
            - 2.0 * x @ (means * p2).transpose(1, 2)
            + (means * means * p2).sum(-1)[:, None, :]
        )
    else:  # one (S, N, D) @ (S, D, D) product per component, never (S, N, M, D)
        cols = []
        for m in range(means.shape[1]):
            shift = (means[:, m : m + 1] @ prec[:, m]).neg()
            y = torch.baddbmm(shift, x, prec[:, m])
            cols.append(y.square().sum(-1))
        maha = torch.stack(cols, dim=-1)
    return -0.5 * (d * _LOG_2PI + maha) - half[:, None, :]


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
        covs = torch.stack(covs_m, dim=1) + reg * _eye_like(covs_m[0])
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


class _Settings(NamedTuple):
    kind: Covariance
    iters: int
    tol: float
    reg: float
    kmeans_iters: int


def _em(
    x: Tensor,
    mask: Tensor,
    k: int,
    opt: _Settings,
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
        prec, half = _precision_factors(cov, kind)
        logp = (
            _log_gauss(x, mu, prec, half, kind) + torch.log(w.clamp_min(1e-30))[:, None]
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


def fit_gmm(
    x: Tensor,
    components: int = 16,
    covariance: Covariance = "full",
    iters: int = 100,
    tol: float = 1e-4,
    reg: float = 1e-4,
    seed: int = 0,
    *,
    name: str | None = None,
    kmeans_iters: int = 10,
    init_means: Tensor | None = None,
    max_patches: int | None = None,
    too_few: Literal["error", "reduce"] = "error",
    dtype: torch.dtype = torch.float32,
) -> GMM:
    r"""Fit a Gaussian mixture to one slide's patch embeddings by EM.

    FedHD design point 1: :math:`P_{real} \approx \sum_m \pi_m
    \mathcal N(\mu_m, \Sigma_m)`, ``M = 16``.

    Parameters
    ----------
    x : Tensor
        ``(N, D)`` patch embeddings.
    components, covariance : int, {"full", "diag"}
        ``M`` and the covariance type.
    iters, tol : int, float
        At most ``iters`` EM iterations; stop when the mean log-likelihood
        changes by less than ``tol * max(1, |ll|)`` (relative, because the
        log-density scales with ``D``; scikit-learn's ``tol`` is absolute).
    reg : float
        Added to every covariance diagonal (scikit-learn's ``reg_covar``).
    seed : int
        k-means++ seeding; the fit is deterministic in ``seed``.
    name : str, optional
        Slide name for error messages.
    kmeans_iters : int
        Lloyd iterations after seeding (0: hard assignment to the seeds).
    init_means : Tensor, optional
        ``(M, D)`` seeds instead of k-means++.
    max_patches : int, optional
        Fit on a seeded random subset of this many patches (speed for large
        ``N``); ``resp`` and ``log_likelihood`` still cover all patches.
    too_few : {"error", "reduce"}
        ``N < M``: raise ``ValueError`` naming the slide, or fit
        ``max(1, N // 2)`` components (at least two patches each on average).
    dtype : torch.dtype
        Working precision (float32; float64 for reference checks).

    Returns
    -------
    GMM
    """
    names = [name] if name is not None else None
    return fit_gmms(
        [x], components, covariance, iters, tol, reg, seed, names=names,
        kmeans_iters=kmeans_iters, init_means=init_means, max_patches=max_patches,
        too_few=too_few, dtype=dtype,
    )[0]  # fmt: skip


def fit_gmms(
    xs: Sequence[Tensor],
    components: int = 16,
    covariance: Covariance = "full",
    iters: int = 100,
    tol: float = 1e-4,
    reg: float = 1e-4,
    seed: int | Sequence[int] = 0,
    *,
    names: Sequence[str] | None = None,
    kmeans_iters: int = 10,
    init_means: Tensor | None = None,
    max_patches: int | None = None,
    too_few: Literal["error", "reduce"] = "error",
    dtype: torch.dtype = torch.float32,
    batch_size: int | None = None,
) -> list[GMM]:
    """:func:`fit_gmm` for many slides, batched (zero-padded, masked) for speed.

    ``seed`` is one seed for all slides or one per slide; each slide gets the
    same result as ``fit_gmm(x, ..., seed=its seed)`` (up to float rounding).
    ``batch_size`` defaults to what fits in about 512 MiB of covariance work
    space.
    """
    if covariance not in ("full", "diag"):
        raise ValueError(f"covariance must be 'full' or 'diag', got {covariance!r}")
    if components < 1:
        raise ValueError(f"components must be >= 1, got {components}")
    seeds = [seed] * len(xs) if isinstance(seed, int) else list(seed)
    if len(seeds) != len(xs):
        raise ValueError(f"got {len(seeds)} seeds for {len(xs)} slides")
    labels = list(names) if names is not None else [f"#{i}" for i in range(len(xs))]
    if not xs or len(labels) != len(xs):
        raise ValueError("need at least one slide and one name per slide")
    ks = []
    for x, name in zip(xs, labels, strict=True):
        if not isinstance(x, Tensor) or x.ndim != 2 or x.shape[0] == 0:
            raise ValueError(f"slide {name!r}: expected (N, D) features, N > 0")
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"slide {name!r}: features contain NaN or inf")
        if x.shape[1] != xs[0].shape[1]:
            raise ValueError(f"slide {name!r}: D={x.shape[1]} != {xs[0].shape[1]}")
        if x.shape[0] < components and too_few == "error":
            raise ValueError(
                f"slide {name!r} has {x.shape[0]} patches, fewer than the "
                f"{components} mixture components (use too_few='reduce' to fit "
                "fewer components)"
            )
        ks.append(components if x.shape[0] >= components else max(1, x.shape[0] // 2))
    if init_means is not None and init_means.shape != (components, xs[0].shape[1]):
        raise ValueError(
            f"init_means must be ({components}, D), got {init_means.shape}"
        )
    d = xs[0].shape[1]
    if batch_size is None:
        per_slide = components * (d * d if covariance == "full" else d) * 4 * 4
        batch_size = int(min(64, max(1, (512 * 2**20) // per_slide)))
    opt = _Settings(covariance, iters, tol, reg, kmeans_iters)
    results: list[GMM | None] = [None] * len(xs)
    for k in sorted(set(ks)):
        todo = [i for i in range(len(xs)) if ks[i] == k]
        for b in range(0, len(todo), batch_size):
            chunk = todo[b : b + batch_size]
            fit_x = [_subsample(xs[i], max_patches, seeds[i]).to(dtype) for i in chunk]
            n_max = max(t.shape[0] for t in fit_x)
            device = fit_x[0].device
            xb = torch.zeros(len(chunk), n_max, d, dtype=dtype, device=device)
            mask = torch.zeros(len(chunk), n_max, dtype=torch.bool, device=device)
            centre = torch.stack([t.mean(0) for t in fit_x])  # float32 safety
            for j, t in enumerate(fit_x):
                xb[j, : t.shape[0]] = t - centre[j]
                mask[j, : t.shape[0]] = True
            gens = [torch.Generator(device=device).manual_seed(seeds[i]) for i in chunk]
            init = None if init_means is None or k != components else init_means
            if init is not None:
                init = init.to(dtype)[None] - centre[:, None]
            w, mu, cov, resp, ll, n_it, conv = _em(xb, mask, k, opt, gens, init)
            for j, i in enumerate(chunk):
                n = fit_x[j].shape[0]
                g = GMM(w[j], mu[j] + centre[j], cov[j], covariance, resp[j, :n])
                g.log_likelihood, g.n_iter = float(ll[j]), int(n_it[j])
                g.converged = bool(conv[j])
                if n != xs[i].shape[0]:  # fitted on a subsample: cover all patches
                    full = g.log_prob_components(xs[i])
                    g.resp = torch.softmax(full, dim=1)
                    g.log_likelihood = float(torch.logsumexp(full, 1).mean())
                results[i] = g
    return [g for g in results if g is not None]


def _subsample(x: Tensor, max_patches: int | None, seed: int) -> Tensor:
    if max_patches is None or x.shape[0] <= max_patches:
        return x
    gen = torch.Generator().manual_seed(seed)
    return x[torch.randperm(x.shape[0], generator=gen)[:max_patches].to(x.device)]
