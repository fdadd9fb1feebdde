"""Self-supervised losses: NT-Xent, FedAD's teacher alignment and orthogonality, MOON.

See :mod:`fedpath.losses` for the conventions and references.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fedpath.losses._common import (
    _check_non_negative,
    _check_pair,
    _check_positive,
    _check_same_shape,
    _check_tensor,
    _cosine,
    _normalize,
)


# ---------------------------------------------------------------------------- FedAD
def nt_xent(z1: Tensor, z2: Tensor, temperature: float = 0.5) -> Tensor:
    r"""SimCLR NT-Xent over the ``2N`` views of ``N`` images (FedAD Eq. 2).

    .. math::

        L = -\frac{1}{2N} \sum_{i=1}^{2N} \log
            \frac{\exp(\mathrm{sim}(z_i, z_{p(i)}) / \tau)}
                 {\sum_{j \ne i} \exp(\mathrm{sim}(z_i, z_j) / \tau)}

    with cosine similarity; the positive :math:`p(i)` is the other view of the same
    image and the other ``2N - 2`` views are negatives. Equal to
    ``supcon_loss(torch.stack([z1, z2], 1), None, temperature)``.

    Parameters
    ----------
    z1, z2 : Tensor
        ``(N, D)`` projections of views *a* and *b*; row ``k`` of both is image ``k``.
    temperature : float
        :math:`\tau` (> 0). The FedAD paper gives no value; 0.5 is an assumption
        (SimCLR's small-batch setting), to be set from the run config.

    Returns
    -------
    Tensor
        Scalar loss (mean over the ``2N`` anchors).

    Raises
    ------
    ValueError
        If ``N < 2`` (no negatives), or on bad shapes.
    """
    _check_pair("z1", z1, "z2", z2)
    t = _check_positive("temperature", temperature)
    n = z1.shape[0]
    if n < 2:
        raise ValueError(
            f"NT-Xent needs at least 2 images per batch, got a batch of N={n} "
            "(z1 and z2 of shape "
            f"{tuple(z1.shape)}); drop the last incomplete batch"
        )
    z = _normalize(torch.cat([z1, z2], dim=0))
    sim = z @ z.T / t
    eye = torch.eye(2 * n, dtype=torch.bool, device=z.device)
    lse = torch.logsumexp(sim.masked_fill(eye, float("-inf")), dim=1)
    partner = torch.arange(2 * n, device=z.device).roll(n)
    pos = sim.gather(1, partner.view(-1, 1)).squeeze(1)
    return (lse - pos).mean()


def _views_shape(name: str, x: Tensor) -> None:
    _check_tensor(name, x, (2, 3))
    if x.shape[0] < 1:
        raise ValueError(f"{name} must hold at least one sample, got {tuple(x.shape)}")


def teacher_alignment_loss(
    z_s: Tensor, z_d: Tensor, z_g: Tensor, weight: float
) -> Tensor:
    r"""FedAD teacher-student alignment :math:`L_{S\text{-}Align}` (Eq. 3).

    .. math::

        L = \frac{\lambda_t}{2} \; \frac{1}{B} \sum_{b=1}^{B} \sum_{v}
            \big[(1 - \cos(z_s^{(v)}, z_g^{(v)}))
            + (1 + \cos(z_d^{(v)}, z_g^{(v)}))\big]

    Aligns the local semantic projection with the frozen global teacher's projection
    and anti-aligns the local domain projection with it. ``z_g`` is detached (the
    teacher is frozen; its auxiliary projection is not trained by this loss).

    Normalisation: Eq. 3 writes :math:`\frac{\lambda_t}{2}\sum_{v \in \{a,b\}}` per
    sample and leaves the batch reduction implicit. This takes the mean over the
    batch and the *sum* over the views passed in, so the paper's form is
    ``teacher_alignment_loss(stack([zs_a, zs_b], 1), stack([zd_a, zd_b], 1),
    stack([zg_a, zg_b], 1), lam)`` (shape ``(B, 2, D)``) = ``lam`` times the mean over
    views and batch of the bracket. A 2-D ``(B, D)`` input is a single view (half of
    that). Do **not** pass the two views concatenated along the batch as
    ``(2B, D)``: that halves the loss relative to Eq. 3.

    Parameters
    ----------
    z_s, z_d, z_g : Tensor
        Semantic, domain and teacher projections, all ``(B, D)`` or ``(B, V, D)``.
    weight : float
        :math:`\lambda_t` (>= 0), the ATSA curriculum weight.

    Returns
    -------
    Tensor
        Scalar loss, in ``[0, 2 * weight * V]``.
    """
    _views_shape("z_s", z_s)
    _check_tensor("z_d", z_d, (2, 3))
    _check_tensor("z_g", z_g, (2, 3))
    _check_same_shape("z_d", z_d, "z_s", z_s)
    _check_same_shape("z_g", z_g, "z_s", z_s)
    w = _check_non_negative("weight", weight)
    z_g = z_g.detach()
    bracket = (1.0 - _cosine(z_s, z_g)) + (1.0 + _cosine(z_d, z_g))
    per_sample = bracket.sum(dim=1) if bracket.dim() == 2 else bracket
    return 0.5 * w * per_sample.mean()


def orthogonality_loss(z_s: Tensor, z_d: Tensor, gamma: float = 2.0) -> Tensor:
    r"""FedAD orthogonality loss :math:`L_{Ortho}` (Eq. 4).

    .. math::

        L = \frac{\gamma}{2} \; \frac{1}{B} \sum_{b=1}^{B} \sum_{v}
            \cos^2(z_s^{(v)}, z_d^{(v)})

    Same shape convention as :func:`teacher_alignment_loss`: mean over the batch,
    sum over the views of a ``(B, V, D)`` input (Eq. 3-4 sum over ``v in {a, b}``);
    ``(B, D)`` is a single view.

    Parameters
    ----------
    z_s, z_d : Tensor
        Semantic and domain projections, ``(B, D)`` or ``(B, V, D)``.
    gamma : float
        :math:`\gamma` (>= 0).

    Returns
    -------
    Tensor
        Scalar loss, in ``[0, gamma * V / 2]``.
    """
    _views_shape("z_s", z_s)
    _check_tensor("z_d", z_d, (2, 3))
    _check_same_shape("z_d", z_d, "z_s", z_s)
    g = _check_non_negative("gamma", gamma)
    cos2 = _cosine(z_s, z_d).pow(2)
    per_sample = cos2.sum(dim=1) if cos2.dim() == 2 else cos2
    return 0.5 * g * per_sample.mean()


# ----------------------------------------------------------------------------- MOON
def moon_contrastive(
    z: Tensor,
    z_glob: Tensor,
    z_prev: Tensor | Sequence[Tensor] | None,
    temperature: float = 0.5,
) -> Tensor:
    r"""MOON model-contrastive loss :math:`\ell_{con}` [MOON]_ (Li et al. 2021).

    .. math::

        \ell_{con} = -\log \frac{e^{\cos(z, z_{glob})/\tau}}
            {e^{\cos(z, z_{glob})/\tau} + \sum_{k} e^{\cos(z, z_{prev}^{k})/\tau}}

    averaged over the batch (the reference computes it as cross-entropy over
    ``[pos, neg...] / tau`` with label 0). ``z_glob`` and ``z_prev`` come from frozen
    models and are detached.

    Parameters
    ----------
    z : Tensor
        ``(B, D)`` projections of the local model being trained.
    z_glob : Tensor
        ``(B, D)`` projections of the frozen global model.
    z_prev : Tensor or sequence of Tensor or None
        ``(B, D)`` projections of this client's previous local model(s) (buffer size
        1 in the reference: one tensor). ``None`` or an empty sequence (round 0,
        empty pool) gives a constant 0 with the dtype/device of ``z``.
    temperature : float
        :math:`\tau` (> 0); the reference default is 0.5.

    Returns
    -------
    Tensor
        Scalar loss.
    """
    _check_pair("z", z, "z_glob", z_glob)
    t = _check_positive("temperature", temperature)
    if z_prev is None:
        prevs: list[Tensor] = []
    elif isinstance(z_prev, Tensor):
        prevs = [z_prev]
    else:
        prevs = list(z_prev)
    for k, zp in enumerate(prevs):
        name = "z_prev" if isinstance(z_prev, Tensor) else f"z_prev[{k}]"
        _check_tensor(name, zp, (2,))
        _check_same_shape(name, zp, "z", z)
    if not prevs:
        return z.new_zeros(())
    pos = _cosine(z, z_glob.detach()) / t
    negs = [_cosine(z, zp.detach()) / t for zp in prevs]
    logits = torch.stack([pos, *negs], dim=1)  # (B, 1 + K)
    return (torch.logsumexp(logits, dim=1) - pos).mean()
