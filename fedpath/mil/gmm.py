r"""Gaussian mixtures of a slide's patch embeddings: the fitted model and its fit.

FedHD (design point 1) models the patch features of every real slide as
:math:`P \approx \sum_{m=1}^{M} \pi_m \mathcal N(\mu_m, \Sigma_m)` with
:math:`M = 16` full covariances. :func:`fit_gmm` fits one slide,
:func:`fit_gmms` many at once (slides are batched, which is what makes the
small-``D`` case fast; a slide's result does not depend on its batch), by the
EM of :mod:`.gmm_em`. A :class:`GMM` scores, assigns and samples patches.

Fits run in float32 on mean-centred data; covariances are kept as ``(M, D, D)``
(64 MiB for ``M = 16, D = 1024``) and nothing of size ``(N, M, D)`` or
``(M, D, D)`` per patch is formed: each component's log-density is one
``(N, D) x (D, D)`` product with the inverse Cholesky factor
(:mod:`.gmm_density`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from fedpath.mil.gmm_density import Covariance, log_gauss, precision_factors
from fedpath.mil.gmm_em import EMSettings, run_em

__all__ = ["GMM", "Covariance", "fit_gmm", "fit_gmms"]


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
            prec, half = precision_factors(self.covs[None], self.covariance)
            self._factors = (prec[0], half[0])
        return self._factors

    def log_prob_components(self, x: Tensor) -> Tensor:
        r"""``(N, M)``: :math:`\log\pi_m + \log\mathcal N(x_n; \mu_m, \Sigma_m)`."""
        prec, half = self.factors()
        x = x.to(self.means.dtype)
        logn = log_gauss(
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
    ks = _components_per_slide(xs, labels, components, too_few)
    if init_means is not None and init_means.shape != (components, xs[0].shape[1]):
        raise ValueError(
            f"init_means must be ({components}, D), got {init_means.shape}"
        )
    d = xs[0].shape[1]
    if batch_size is None:
        per_slide = components * (d * d if covariance == "full" else d) * 4 * 4
        batch_size = int(min(64, max(1, (512 * 2**20) // per_slide)))
    opt = EMSettings(covariance, iters, tol, reg, kmeans_iters)
    results: list[GMM | None] = [None] * len(xs)
    for k in sorted(set(ks)):
        todo = [i for i in range(len(xs)) if ks[i] == k]
        for b in range(0, len(todo), batch_size):
            chunk = todo[b : b + batch_size]
            init = None if init_means is None or k != components else init_means
            fitted = _fit_chunk([xs[i] for i in chunk], [seeds[i] for i in chunk],
                                k, opt, init, max_patches, dtype)  # fmt: skip
            for i, g in zip(chunk, fitted, strict=True):
                results[i] = g
    return [g for g in results if g is not None]


def _components_per_slide(
    xs: Sequence[Tensor],
    labels: Sequence[str],
    components: int,
    too_few: Literal["error", "reduce"],
) -> list[int]:
    """Check each slide's features; the components it gets (``components``, or
    half its patches with ``too_few="reduce"``)."""
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
    return ks


def _fit_chunk(
    xs: Sequence[Tensor],
    seeds: Sequence[int],
    k: int,
    opt: EMSettings,
    init_means: Tensor | None,
    max_patches: int | None,
    dtype: torch.dtype,
) -> list[GMM]:
    """One batched EM over slides ``xs`` with ``k`` components each: zero-padded
    and masked, each slide centred on its mean (float32 safety)."""
    fit_x = [
        _subsample(x, max_patches, s).to(dtype) for x, s in zip(xs, seeds, strict=True)
    ]
    n_max = max(t.shape[0] for t in fit_x)
    device = fit_x[0].device
    xb = torch.zeros(len(xs), n_max, xs[0].shape[1], dtype=dtype, device=device)
    mask = torch.zeros(len(xs), n_max, dtype=torch.bool, device=device)
    centre = torch.stack([t.mean(0) for t in fit_x])
    for j, t in enumerate(fit_x):
        xb[j, : t.shape[0]] = t - centre[j]
        mask[j, : t.shape[0]] = True
    gens = [torch.Generator(device=device).manual_seed(s) for s in seeds]
    init = None if init_means is None else init_means.to(dtype)[None] - centre[:, None]
    w, mu, cov, resp, ll, n_it, conv = run_em(xb, mask, k, opt, gens, init)
    out = []
    for j, x in enumerate(xs):
        n = fit_x[j].shape[0]
        g = GMM(w[j], mu[j] + centre[j], cov[j], opt.kind, resp[j, :n])
        g.log_likelihood, g.n_iter = float(ll[j]), int(n_it[j])
        g.converged = bool(conv[j])
        if n != x.shape[0]:  # fitted on a subsample: cover all patches
            full = g.log_prob_components(x)
            g.resp = torch.softmax(full, dim=1)
            g.log_likelihood = float(torch.logsumexp(full, 1).mean())
        out.append(g)
    return out


def _subsample(x: Tensor, max_patches: int | None, seed: int) -> Tensor:
    if max_patches is None or x.shape[0] <= max_patches:
        return x
    gen = torch.Generator().manual_seed(seed)
    return x[torch.randperm(x.shape[0], generator=gen)[:max_patches].to(x.device)]
