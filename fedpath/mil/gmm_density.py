r"""Gaussian log-densities from Cholesky precision factors, batched over slides.

Shared by the EM fit (:mod:`.gmm_em`) and a fitted :class:`~.gmm.GMM`: a full
covariance :math:`\Sigma = L L^\top` is used through :math:`P = L^{-\top}`, so
the Mahalanobis distance is :math:`|(x - \mu) P|^2` and the log-determinant
:math:`2 \sum \log \mathrm{diag}\, L`; nothing of size ``(N, M, D)`` is formed.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

Covariance = Literal["full", "diag"]
_LOG_2PI = math.log(2 * math.pi)


def eye_like(cov: Tensor) -> Tensor:
    return torch.eye(cov.shape[-1], dtype=cov.dtype, device=cov.device)


def precision_factors(covs: Tensor, kind: Covariance) -> tuple[Tensor, Tensor]:
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
        chol[info > 0] = torch.linalg.cholesky(c64 + jitter * eye_like(c64)).to(chol)
    inv = torch.linalg.solve_triangular(
        chol, eye_like(chol).expand_as(chol), upper=False
    )
    half = torch.log(chol.diagonal(dim1=-2, dim2=-1)).sum(-1)
    return inv.transpose(-1, -2), half


def log_gauss(
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
