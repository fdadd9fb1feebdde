"""Supervised contrastive losses: SupCon, FedStain's paired SupCon, FedCCRL's term.

See :mod:`fedpath.losses` for the conventions and references.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from fedpath.losses._common import (
    _check_labels,
    _check_pair,
    _check_positive,
    _check_reduction,
    _check_tensor,
    _normalize,
    _positive_terms,
    _reduce,
    _stack_view_major,
)


# -------------------------------------------------------------------------- SupCon
def supcon_loss(
    features: Tensor,
    labels: Tensor | None = None,
    temperature: float = 0.1,
    base_temperature: float | None = None,
    normalize: bool = True,
    reduction: Literal["mean", "sum"] = "mean",
) -> Tensor:
    r"""Supervised contrastive loss :math:`L^{sup}_{out}` [Khosla2020]_, FedStain Eq. 3.

    .. math::

        L = \operatorname{red}_{i \in I} \; -\frac{T}{T_{base}} \frac{1}{|P(i)|}
            \sum_{p \in P(i)} \log
            \frac{\exp(s(z_i, z_p) / T)}{\sum_{a \in A(i)} \exp(s(z_i, z_a) / T)}

    with :math:`A(i) = I \setminus \{i\}` and
    :math:`P(i) = \{p \in A(i) : y_p = y_i\}`. An anchor with :math:`|P(i)| = 0`
    contributes 0 but still counts in the mean, as in the reference implementation
    (HobbitLong/SupContrast). The denominator is computed with log-sum-exp.

    Parameters
    ----------
    features : Tensor
        Either ``(N, D)``: every row is an anchor (views already stacked along the
        batch), or ``(B, V, D)``: ``V`` views of ``B`` samples, flattened view-major
        into ``N = V * B`` anchors (as the reference code does).
    labels : Tensor, optional
        Class labels, ``(N,)`` for 2-D features or ``(B,)`` for 3-D features (then
        repeated over the views). ``None`` gives SimCLR positives: the other views of
        the same sample; this needs the ``(B, V, D)`` form.
    temperature : float
        :math:`T` (> 0). The reference default is 0.07; FedStain (Section V-B) and
        FedCCRL use 0.1.
    base_temperature : float, optional
        :math:`T_{base}`; ``None`` means ``temperature`` (no ``T / T_base`` scaling,
        which is the form of FedStain Eq. 3).
    normalize : bool
        L2-normalise the features first, so :math:`s` is the cosine similarity of
        FedStain Eq. 3 (the reference code expects already-normalised input; a
        second normalisation is a no-op). ``False`` uses raw dot products.
    reduction : {"mean", "sum"}
        ``"mean"`` over the ``N`` anchors (default; the reference code) or ``"sum"``
        (FedStain Eq. 3 as printed sums over :math:`i \in I`; it equals ``N`` times
        the mean).

    Returns
    -------
    Tensor
        Scalar loss.

    Raises
    ------
    ValueError
        On bad shapes, ``N < 2`` anchors, ``labels=None`` with 2-D features, or a
        non-positive temperature.
    """
    _check_tensor("features", features, (2, 3))
    t = _check_positive("temperature", temperature)
    t_base = (
        t
        if base_temperature is None
        else _check_positive("base_temperature", base_temperature)
    )
    _check_reduction(reduction, ("mean", "sum"))

    if features.dim() == 3:
        b, v, _ = features.shape
        z = _stack_view_major(features)
        if labels is None:
            ids = torch.arange(b, device=features.device).repeat(v)
        else:
            ids = _check_labels("labels", labels, b, "sample (dim 0 of features)")
            ids = ids.to(features.device).repeat(v)
    else:
        if labels is None:
            raise ValueError(
                "labels=None (SimCLR positives) needs features of shape (B, V, D) "
                "so that the views of one sample are known; got 2-D features "
                f"{tuple(features.shape)}"
            )
        z = features
        ids = _check_labels("labels", labels, z.shape[0], "row of features")
        ids = ids.to(features.device)
    if z.shape[0] < 2:
        raise ValueError(
            "supcon_loss needs at least 2 anchors, got features "
            f"{tuple(features.shape)}"
        )
    if normalize:
        z = _normalize(z)
    sim = z @ z.T / t
    same = ids.unsqueeze(1) == ids.unsqueeze(0)
    sum_pos, lse, n_pos = _positive_terms(sim, same)
    # mean_{p in P(i)} log softmax_ip = (sum_p s_ip - |P(i)| lse_i) / |P(i)|; with
    # |P(i)| = 0 the numerator is exactly 0, so such an anchor contributes 0.
    mean_log_prob = (sum_pos - n_pos * lse) / n_pos.clamp(min=1.0)
    return _reduce(-(t / t_base) * mean_log_prob, reduction)


def paired_supcon(
    z: Tensor,
    z_view: Tensor,
    labels: Tensor,
    temperature: float = 0.1,
    reduction: Literal["mean", "sum"] = "mean",
) -> Tensor:
    r"""FedStain :math:`L_{SupCon}(Z, X)`, the building block of Eq. 4.

    SupCon (:func:`supcon_loss`, cosine similarity, no ``T / T_base`` factor) over the
    ``2B`` samples ``[z; z_view]`` with ``labels`` repeated, so each anchor's
    positives are its own other view plus every same-class sample of either set.
    FedStain Eq. 4 averages this over ``X`` in ``{Z^stain, Z^(1), Z^(2)}``:
    ``L_RA = mean(paired_supcon(z, x, y) for x in (z_stain, z1, z2))``.

    Parameters
    ----------
    z, z_view : Tensor
        ``(B, D)`` features of the original images and of one augmented version.
    labels : Tensor
        ``(B,)`` class labels.
    temperature : float
        :math:`\tau` (> 0).
    reduction : {"mean", "sum"}
        Over the ``2B`` anchors; see :func:`supcon_loss`.

    Returns
    -------
    Tensor
        Scalar loss.
    """
    _check_pair("z", z, "z_view", z_view)
    return supcon_loss(
        torch.stack([z, z_view], dim=1),
        labels,
        temperature=temperature,
        normalize=True,
        reduction=reduction,
    )


def fedccrl_contrastive(
    z: Tensor, z_view: Tensor, labels: Tensor, temperature: float = 0.1
) -> Tensor:
    r"""Supervised contrastive term :math:`S` of the released FedCCRL/FedAlign code.

    Over the ``2B`` L2-normalised samples ``[z; z_view]`` with labels repeated and
    :math:`s_{ij} = z_i \cdot z_j / t`,

    .. math::

        S = \frac{1}{2B} \sum_i \Big( \log \sum_{a \ne i} e^{s_{ia}}
            - \frac{1}{|P(i)| + 1} \sum_{p \in P(i) \cup \{i\}} s_{ip} \Big)

    It differs from SupCon: the positives *include the anchor itself*
    (:math:`s_{ii} = 1/t`, a constant, so no gradient flows through it), the
    denominator excludes self, there is no ``T / T_base`` factor, and every anchor
    has at least one positive. Per anchor, with SupCon's :math:`L_i` and
    :math:`LSE_i = \log \sum_{a \ne i} e^{s_{ia}}`,
    :math:`S_i = (|P(i)| L_i + LSE_i - 1/t) / (|P(i)| + 1)`.
    The repo computes the denominator without max-subtraction; this uses
    log-sum-exp (same value, no overflow). The order of ``z`` and ``z_view`` does
    not matter. Use this to reproduce FedCCRL/FedAlign (``t = 0.1``, features of
    the backbone without projection head); use :func:`paired_supcon` elsewhere.

    Parameters
    ----------
    z, z_view, labels
        As in :func:`paired_supcon`.
    temperature : float
        :math:`t` (> 0).

    Returns
    -------
    Tensor
        Scalar loss, the mean over the ``2B`` anchors.
    """
    _check_pair("z", z, "z_view", z_view)
    t = _check_positive("temperature", temperature)
    ids = _check_labels("labels", labels, z.shape[0], "row of z").to(z.device)
    if z.shape[0] < 1:
        raise ValueError(f"z must hold at least one sample, got {tuple(z.shape)}")
    samples = _normalize(torch.cat([z, z_view], dim=0))
    ids = ids.repeat(2)
    sim = samples @ samples.T / t
    same = ids.unsqueeze(1) == ids.unsqueeze(0)
    sum_pos, lse, n_pos = _positive_terms(sim, same)
    # Self as an extra positive with the constant similarity 1/t (unit vectors).
    per_anchor = lse - (sum_pos + 1.0 / t) / (n_pos + 1.0)
    return per_anchor.mean()
