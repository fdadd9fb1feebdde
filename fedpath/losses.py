"""Loss functions of FedStain, FedCCRL/FedAlign, FedAD and MOON.

Every loss is a pure, differentiable function of tensors: no modules, no state, no
randomness. Numerically delicate steps use log-sum-exp, ``log_softmax``, ``expm1``
and explicit clamps, so the losses stay finite for large logits, tiny temperatures
and (for the cosine-based losses) all-zero feature vectors.

Shapes follow one convention: a *view* axis, where present, is axis 1, i.e.
``(B, V, D)`` holds ``V`` views of each of ``B`` samples. Contrastive losses that
flatten it stack the views *view-major* (all samples of view 0, then of view 1, ...),
as ``torch.cat(torch.unbind(features, dim=1), dim=0)`` does, so anchor ``v * B + b``
is view ``v`` of sample ``b``.

References
----------
.. [Khosla2020] P. Khosla et al., "Supervised Contrastive Learning", NeurIPS 2020.
.. [FedStain] FedStain, Section III-E, Eq. 3-6 (SupCon representation alignment
   and Jensen-Shannon prediction alignment).
.. [FedCCRL] Wang, Guo, Tang, "FedCCRL", arXiv 2410.11267 (and the FedAlign fork,
   arXiv 2501.15486): supervised contrastive term of the released client code.
.. [FedAD] FedAD, Section 4, Eq. 1-4 (NT-Xent, teacher alignment, orthogonality).
.. [SimCLR] T. Chen et al., "A Simple Framework for Contrastive Learning of Visual
   Representations", ICML 2020.
.. [AugMix] D. Hendrycks et al., "AugMix", ICLR 2020 (Jensen-Shannon consistency).
.. [GCE] Z. Zhang and M. Sabuncu, "Generalized Cross Entropy Loss for Training Deep
   Neural Networks with Noisy Labels", NeurIPS 2018.
.. [MOON] Q. Li, B. He, D. Song, "Model-Contrastive Federated Learning", CVPR 2021.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "fedccrl_contrastive",
    "generalized_cross_entropy",
    "js_divergence",
    "moon_contrastive",
    "nt_xent",
    "orthogonality_loss",
    "paired_supcon",
    "supcon_loss",
    "teacher_alignment_loss",
]

#: Floor on vector norms before dividing (``F.normalize``); a zero vector maps to 0.
NORM_EPS = 1e-12


# --------------------------------------------------------------------------- checks
def _check_tensor(name: str, x: object, dims: tuple[int, ...]) -> Tensor:
    """``x`` as a floating-point tensor whose number of dimensions is in ``dims``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() not in dims:
        want = " or ".join(f"{d}-D" for d in dims)
        raise ValueError(f"{name} must be {want}, got shape {tuple(x.shape)}")
    return x


def _check_same_shape(name: str, x: Tensor, ref_name: str, ref: Tensor) -> None:
    if x.shape != ref.shape:
        raise ValueError(
            f"{name} must have the shape of {ref_name} {tuple(ref.shape)}, "
            f"got {tuple(x.shape)}"
        )


def _check_labels(name: str, labels: object, n: int, what: str) -> Tensor:
    """``labels`` as a 1-D tensor of length ``n`` (``what`` says what ``n`` counts)."""
    if not isinstance(labels, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(labels).__name__}")
    if labels.dim() != 1 or labels.shape[0] != n:
        raise ValueError(
            f"{name} must have shape ({n},) (one label per {what}), "
            f"got {tuple(labels.shape)}"
        )
    return labels


def _check_positive(name: str, value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _check_non_negative(name: str, value: float) -> float:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _check_reduction(reduction: str, allowed: tuple[str, ...]) -> None:
    if reduction not in allowed:
        raise ValueError(f"reduction must be one of {allowed}, got {reduction!r}")


def _normalize(x: Tensor) -> Tensor:
    """L2-normalise along the last axis (zero vectors stay zero, gradient finite)."""
    return F.normalize(x, p=2.0, dim=-1, eps=NORM_EPS)


def _cosine(a: Tensor, b: Tensor) -> Tensor:
    """Cosine similarity along the last axis; 0 when either vector is zero."""
    return (_normalize(a) * _normalize(b)).sum(dim=-1)


def _reduce(values: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return values.mean()
    if reduction == "sum":
        return values.sum()
    return values


def _stack_view_major(features: Tensor) -> Tensor:
    """``(B, V, D)`` -> ``(V * B, D)``: view 0 of every sample, then view 1, ..."""
    b, v, d = features.shape
    return features.transpose(0, 1).reshape(v * b, d)


def _positive_terms(sim: Tensor, same: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""Per-anchor pieces of SupCon-type losses from the scaled similarity matrix.

    Parameters
    ----------
    sim : Tensor
        ``(N, N)`` similarities already divided by the temperature.
    same : Tensor
        ``(N, N)`` boolean, ``same[i, j]`` iff anchors ``i`` and ``j`` share a label
        (the diagonal is ignored).

    Returns
    -------
    sum_pos, lse, n_pos : Tensor
        ``(N,)`` each: :math:`\sum_{p \in P(i)} s_{ip}`, the log-sum-exp
        :math:`\log \sum_{a \in A(i)} e^{s_{ia}}` and :math:`|P(i)|` (as
        ``sim.dtype``), with :math:`A(i) = \{a \ne i\}` and
        :math:`P(i) = \{p \in A(i) : y_p = y_i\}`.
    """
    n = sim.shape[0]
    eye = torch.eye(n, dtype=torch.bool, device=sim.device)
    # Self is excluded from A(i) by a -inf entry; logsumexp subtracts the row maximum
    # internally, which is the stable form of the reference code's max-subtraction.
    lse = torch.logsumexp(sim.masked_fill(eye, float("-inf")), dim=1)
    pos = same & ~eye
    sum_pos = torch.where(pos, sim, torch.zeros_like(sim)).sum(dim=1)
    return sum_pos, lse, pos.sum(dim=1).to(sim.dtype)


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
    _check_tensor("z", z, (2,))
    _check_tensor("z_view", z_view, (2,))
    _check_same_shape("z_view", z_view, "z", z)
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
    z, z_view : Tensor
        ``(B, D)`` features of the original images and of one augmented version.
    labels : Tensor
        ``(B,)`` class labels.
    temperature : float
        :math:`t` (> 0).

    Returns
    -------
    Tensor
        Scalar loss, the mean over the ``2B`` anchors.
    """
    _check_tensor("z", z, (2,))
    _check_tensor("z_view", z_view, (2,))
    _check_same_shape("z_view", z_view, "z", z)
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


# ------------------------------------------------------------- prediction alignment
def js_divergence(logits: Sequence[Tensor], eps: float = 1e-7) -> Tensor:
    r"""Generalised Jensen-Shannon divergence of ``M`` predictions (FedStain Eq. 5).

    .. math::

        L_{JS} = \frac{1}{M} \sum_{i=1}^{M} D_{KL}(p_i \,\|\, m), \qquad
        p_i = \operatorname{softmax}(\ell_i), \quad
        m = \operatorname{clamp}\Big(\frac{1}{M} \sum_i p_i, \epsilon, 1\Big)

    as in AugMix and the FedCCRL code (``F.kl_div(m.log(), p_i, "batchmean")``): the
    KL is summed over classes and averaged over the batch. It is 0 for identical
    predictions, symmetric in its arguments and at most :math:`\log M` (natural
    log) up to the clamp.

    Parameters
    ----------
    logits : sequence of Tensor
        ``M >= 2`` tensors of shape ``(B, C)`` (unnormalised scores of the ``M``
        versions of one batch, e.g. original + two augmentations).
    eps : float
        Lower clamp on the mixture, in ``(0, 1)``.

    Returns
    -------
    Tensor
        Scalar loss.
    """
    if isinstance(logits, Tensor) or not isinstance(logits, Sequence):
        raise TypeError("logits must be a sequence (list/tuple) of tensors")
    if len(logits) < 2:
        raise ValueError(f"logits must hold at least 2 tensors, got {len(logits)}")
    if not (math.isfinite(eps) and 0 < eps < 1):
        raise ValueError(f"eps must be in (0, 1), got {eps!r}")
    first = _check_tensor("logits[0]", logits[0], (2,))
    for k, lg in enumerate(logits[1:], start=1):
        _check_tensor(f"logits[{k}]", lg, (2,))
        _check_same_shape(f"logits[{k}]", lg, "logits[0]", first)
    if first.shape[0] < 1:
        raise ValueError("logits must hold at least one sample (B >= 1), got B=0")
    log_p = torch.stack([F.log_softmax(lg, dim=1) for lg in logits])  # (M, B, C)
    p = log_p.exp()
    log_m = p.mean(dim=0).clamp(min=eps, max=1.0).log()
    # p * (log p - log m); log_softmax keeps log p finite, and p underflowing to 0
    # gives 0 (torch's kl_div uses xlogy for the same reason).
    kl = (p * (log_p - log_m.unsqueeze(0))).sum(dim=2)  # (M, B)
    return kl.mean()


def generalized_cross_entropy(
    logits: Tensor,
    targets: Tensor,
    q: float = 0.7,
    reduction: Literal["mean", "sum", "none"] = "mean",
) -> Tensor:
    r"""Generalised cross-entropy :math:`L_q` of [GCE]_ (Zhang & Sabuncu 2018, Eq. 6).

    .. math:: L_q(p, y) = \frac{1 - p_y^{q}}{q}, \qquad q \in (0, 1]

    computed as ``-expm1(q * log_softmax(logits)[y]) / q``, which is stable for
    tiny ``q`` and saturated logits. ``q -> 0`` recovers cross-entropy
    :math:`-\log p_y`; ``q = 1`` gives the MAE-like :math:`1 - p_y`. The paper's
    default is ``q = 0.7``.

    Parameters
    ----------
    logits : Tensor
        ``(B, C)`` unnormalised class scores.
    targets : Tensor
        ``(B,)`` integer class indices in ``[0, C)``.
    q : float
        Exponent in ``(0, 1]``.
    reduction : {"mean", "sum", "none"}
        Over the batch; ``"none"`` returns the ``(B,)`` per-sample losses.

    Returns
    -------
    Tensor
        Scalar loss, or ``(B,)`` with ``reduction="none"``.
    """
    _check_tensor("logits", logits, (2,))
    if not isinstance(targets, Tensor):
        raise TypeError(f"targets must be a torch.Tensor, got {type(targets).__name__}")
    if (
        targets.is_floating_point()
        or targets.is_complex()
        or targets.dtype == torch.bool
    ):
        raise ValueError(
            f"targets must hold integer class indices, got {targets.dtype}"
        )
    b, c = logits.shape
    _check_labels("targets", targets, b, "row of logits")
    if not (math.isfinite(q) and 0 < q <= 1):
        raise ValueError(f"q must be in (0, 1], got {q!r}")
    _check_reduction(reduction, ("mean", "sum", "none"))
    if b and (int(targets.min()) < 0 or int(targets.max()) >= c):
        raise ValueError(f"targets must lie in [0, {c}), got values outside")
    log_py = F.log_softmax(logits, dim=1).gather(1, targets.long().view(-1, 1))
    per_sample = -torch.expm1(q * log_py.squeeze(1)) / q
    return _reduce(per_sample, reduction)


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
    _check_tensor("z1", z1, (2,))
    _check_tensor("z2", z2, (2,))
    _check_same_shape("z2", z2, "z1", z1)
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
    _check_tensor("z", z, (2,))
    _check_tensor("z_glob", z_glob, (2,))
    _check_same_shape("z_glob", z_glob, "z", z)
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
