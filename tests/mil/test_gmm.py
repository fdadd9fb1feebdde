"""Per-slide Gaussian mixtures: EM against scikit-learn and scipy, batching, errors."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture

from fedpath.mil.gmm import Covariance, fit_gmm, fit_gmms

REG = 1e-4


def _blobs(n: int = 600, d: int = 5, m: int = 4, seed: int = 0) -> np.ndarray:
    """Anisotropic, well separated Gaussian clusters."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 4, (m, d))
    mix = rng.normal(0, 0.6, (m, d, d))
    z = rng.integers(0, m, n)
    return centres[z] + np.einsum("nd,nde->ne", rng.normal(size=(n, d)), mix[z])


def _hard_init(x: np.ndarray, seeds: np.ndarray, kind: str) -> dict[str, np.ndarray]:
    """sklearn init parameters equal to ours with kmeans_iters=0 (independent)."""
    z = ((x[:, None] - seeds[None]) ** 2).sum(-1).argmin(1)
    r = np.eye(len(seeds))[z]
    nk = r.sum(0) + 10 * np.finfo(np.float64).eps
    means = r.T @ x / nk[:, None]
    if kind == "full":
        covs = np.stack(
            [
                (x - means[m]).T @ ((x - means[m]) * r[:, m : m + 1]) / nk[m]
                + REG * np.eye(x.shape[1])
                for m in range(len(seeds))
            ]
        )
        prec = np.linalg.inv(covs)
    else:
        prec = 1.0 / ((r.T @ x**2) / nk[:, None] - means**2 + REG)
    return {"weights_init": nk / nk.sum(), "means_init": means, "precisions_init": prec}


@pytest.mark.parametrize("kind", ["full", "diag"])
def test_em_matches_sklearn_from_the_same_start(kind: Covariance) -> None:
    x = _blobs()
    seeds = x[[3, 50, 200, 400]]
    for iters in (1, 7):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            sk = GaussianMixture(
                4, covariance_type=kind, reg_covar=REG, max_iter=iters, tol=0,
                **_hard_init(x, seeds, kind),
            ).fit(x)  # fmt: skip
        kw = {"iters": iters, "tol": 0.0, "reg": REG, "kmeans_iters": 0}
        g64 = fit_gmm(
            torch.tensor(x), 4, kind, init_means=torch.tensor(seeds),
            dtype=torch.float64, **kw,  # type: ignore[arg-type]
        )  # fmt: skip
        assert np.allclose(g64.means.numpy(), sk.means_, atol=1e-9)
        assert np.allclose(g64.covs.numpy(), sk.covariances_, atol=1e-9)
        assert np.allclose(g64.weights.numpy(), sk.weights_, atol=1e-12)
        assert g64.n_iter == iters
        g32 = fit_gmm(
            torch.tensor(x, dtype=torch.float32), 4, kind,
            init_means=torch.tensor(seeds), **kw,  # type: ignore[arg-type]
        )  # fmt: skip
        assert np.allclose(g32.means.numpy(), sk.means_, atol=1e-4)
        assert np.allclose(g32.covs.numpy(), sk.covariances_, atol=1e-4)


@pytest.mark.parametrize("kind", ["full", "diag"])
def test_default_fit_reaches_sklearn_log_likelihood(kind: Covariance) -> None:
    x = _blobs(n=1500, d=8, m=5, seed=1)
    sk = GaussianMixture(5, covariance_type=kind, reg_covar=REG, random_state=0)
    sk_ll = sk.fit(x).score(x)
    g = fit_gmm(torch.tensor(x, dtype=torch.float32), 5, kind, seed=0)
    assert g.converged and g.n_iter < 100
    assert abs(g.log_likelihood - sk_ll) <= 0.01 * abs(sk_ll)
    # log_likelihood is the mean log-density under the returned parameters
    dens = g.score_samples(torch.tensor(x, dtype=torch.float32))
    assert abs(float(dens.mean()) - g.log_likelihood) < 1e-4 * abs(sk_ll)


def test_log_density_matches_scipy() -> None:
    x = torch.tensor(_blobs(n=300), dtype=torch.float64)
    g = fit_gmm(x, 3, "full", dtype=torch.float64)
    ref = sum(
        float(w) * multivariate_normal(mu.numpy(), cov.numpy()).pdf(x.numpy())
        for w, mu, cov in zip(g.weights, g.means, g.covs, strict=True)
    )
    assert np.allclose(g.score_samples(x).numpy(), np.log(ref), atol=1e-8)
    assert torch.allclose(g.resp.sum(1), torch.ones(300, dtype=torch.float64))  # type: ignore[union-attr]
    assert torch.equal(g.predict(x), g.resp.argmax(1))  # type: ignore[union-attr]


def test_em_never_decreases_the_likelihood() -> None:
    x = torch.tensor(_blobs(n=400, d=4, m=6, seed=2))
    lls = [
        fit_gmm(
            x, 6, iters=t, tol=0.0, kmeans_iters=0, dtype=torch.float64
        ).log_likelihood
        for t in range(6)
    ]
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(lls))


def test_batched_fit_equals_single_fits_and_is_seeded() -> None:
    rng = np.random.default_rng(0)
    xs = [
        torch.tensor(_blobs(n=int(rng.integers(80, 200)), seed=s), dtype=torch.float32)
        for s in range(5)
    ]
    many = fit_gmms(xs, 4, "full", seed=3)
    for x, g in zip(xs, many, strict=True):
        one = fit_gmm(x, 4, "full", seed=3)
        assert torch.allclose(one.means, g.means, atol=1e-4)
        assert abs(one.log_likelihood - g.log_likelihood) < 1e-4
        assert g.resp is not None and g.resp.shape == (x.shape[0], 4)
    again = fit_gmm(xs[0], 4, "full", seed=3)
    assert torch.equal(again.means, fit_gmm(xs[0], 4, "full", seed=3).means)


def test_empty_components_are_reseeded() -> None:
    x = torch.tensor(_blobs(n=300, m=3), dtype=torch.float32)
    seeds = torch.stack([x[0], x[0], x[100], x[200]])  # a duplicate seed: empty
    g = fit_gmm(x, 4, init_means=seeds, kmeans_iters=0, iters=20)
    nk = g.resp.sum(0)  # type: ignore[union-attr]
    assert bool((nk >= 1.0).all()), nk


def test_too_few_patches_error_or_reduce() -> None:
    x = torch.randn(10, 3)
    with pytest.raises(ValueError, match=r"slide 'tcga-01' has 10 patches"):
        fit_gmm(x, 16, name="tcga-01")
    g = fit_gmm(x, 16, too_few="reduce")
    assert g.num_components == 5 and g.resp is not None and g.resp.shape == (10, 5)
    with pytest.raises(ValueError, match="NaN"):
        fit_gmm(torch.full((20, 2), float("nan")), 2, name="bad")


def test_subsampled_fit_covers_all_patches() -> None:
    x = torch.tensor(_blobs(n=2000), dtype=torch.float32)
    g = fit_gmm(x, 4, max_patches=500)
    assert g.resp is not None and g.resp.shape == (2000, 4)
    full = fit_gmm(x, 4)
    assert abs(g.log_likelihood - full.log_likelihood) < 0.02 * abs(full.log_likelihood)


def test_sampling_follows_the_components() -> None:
    x = torch.tensor(_blobs(n=800), dtype=torch.float64)
    g = fit_gmm(x, 4, dtype=torch.float64)
    draws = g.sample(torch.tensor([0, 3000, 0, 0]), torch.Generator().manual_seed(0))
    assert draws.shape == (3000, x.shape[1])
    assert torch.allclose(draws.mean(0), g.means[1], atol=0.1)
    rel = (torch.cov(draws.T) - g.covs[1]).norm() / g.covs[1].norm()
    assert float(rel) < 0.1
