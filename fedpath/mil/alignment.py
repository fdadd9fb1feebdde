"""FedHD's feature-alignment objective: the loss that pulls synthetic tokens onto
a slide's Gaussian mixture (design points 1-2), token allocation per component,
and the single-Gaussian target of the ablations. Used by :mod:`fedpath.mil.distill`.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from fedpath.mil.gmm import GMM, Covariance

Weighting = Literal["uniform", "assigned"]


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


def group_terms(
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


def token_weights(counts: Tensor, weighting: Weighting, t_count: int) -> Tensor:
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
    terms, counts = group_terms(
        tokens, assignment, target.means, target.covs, target.covariance,
        covariance_term, cov_sq_norms,
    )  # fmt: skip
    return (terms * token_weights(counts, weighting, tokens.shape[0]).to(terms)).sum()


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
