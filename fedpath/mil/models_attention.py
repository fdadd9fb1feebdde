"""Attention-pooling MIL models: ABMIL, CLAM-SB, CLAM-MB and ACMIL.

All four share CLAM's layout: a per-patch feature reduction ``h = ReLU(W x)``,
gated attention logits over the patches, softmax, attention-weighted pooling
and a linear classifier. They differ in the number of attention branches and
in the auxiliary loss (see each class). Sizes default to the papers'
(``in_dim -> 512 -> 256`` for ABMIL/CLAM, ``-> 256 -> 128`` for ACMIL).
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedpath.mil.models import (
    MIL_MODELS,
    GatedAttention,
    MILModel,
    MILOutput,
    feature_reduction,
    label_index,
)
from fedpath.params.mil import ABMILParams, ACMILParams, CLAMParams


class ABMIL(MILModel):
    r"""Attention-based deep MIL (Ilse et al., ICML 2018, Eqs. 8-9).

    :math:`z = \sum_k a_k h_k` with gated attention :math:`a = \mathrm{softmax}
    (w^\top(\tanh(Vh) \odot \sigma(Uh)))`, then a linear softmax classifier
    (the pathology usage: CLAM's ``fc 1024 -> 512`` before the attention,
    generalised to ``in_dim -> hidden``). No auxiliary loss.
    """

    def __init__(self, p: ABMILParams, in_dim: int, num_classes: int) -> None:
        super().__init__(in_dim, num_classes)
        dim = p.hidden or in_dim
        self.fc = (
            feature_reduction(in_dim, dim, p.dropout) if p.hidden else nn.Identity()
        )
        self.attention = GatedAttention(dim, p.attn_dim, 1, p.dropout, p.gated)
        self.classifier = nn.Linear(dim, num_classes)

    def forward(self, bag: Tensor, label: Tensor | int | None = None) -> MILOutput:
        h = self.fc(self.check_bag(bag))
        a = torch.softmax(self.attention(h), dim=1)  # (1, N)
        z = a @ h
        return MILOutput(self.classifier(z), a, self.zero(h), z)


class CLAM(MILModel):
    r"""CLAM-SB / CLAM-MB (Lu et al., Nat. Biomed. Eng. 2021).

    SB: one attention branch, :math:`\text{logits} = W_c(a^\top h)`. MB: one
    branch per class, :math:`\text{logit}_c = w_c^\top(a_c^\top h)`.

    Instance-level clustering (training, label given): for the true class
    :math:`y` (the branch :math:`a_y` in MB, the single branch in SB), the
    ``k`` highest-attention patches are pseudo-labelled positive and the ``k``
    lowest negative for that class's instance classifier (``hidden -> 2``);
    with ``subtyping`` the other classes' top ``k`` are also negatives for
    their classifiers and the loss is averaged over classes. CLAM's objective
    is ``bag_weight * L_bag + (1 - bag_weight) * L_inst``; the training loop
    adds ``aux_loss`` to ``L_bag``, so ``aux_loss = (1 - w) / w * L_inst`` gives
    that objective times ``1 / w``, a constant factor to which Adam(W) is
    invariant. ``k = min(k_sample, N // 2)`` so top and bottom never overlap
    (CLAM's ``topk`` fails when ``N < k_sample``); ``N = 1`` has no instance loss.
    The instance loss is cross-entropy (CLAM's default; the smooth-SVM option
    of its README is not implemented).
    """

    def __init__(
        self, p: CLAMParams, in_dim: int, num_classes: int, multi_branch: bool
    ) -> None:
        super().__init__(in_dim, num_classes)
        self.p = p
        self.multi_branch = multi_branch
        branches = num_classes if multi_branch else 1
        self.fc = feature_reduction(in_dim, p.hidden, p.dropout)
        self.attention = GatedAttention(
            p.hidden, p.attn_dim, branches, p.dropout, p.gated
        )
        if multi_branch:  # one scalar scorer per class on its own pooled vector
            self.bag_heads = nn.ModuleList(
                nn.Linear(p.hidden, 1) for _ in range(num_classes)
            )
        else:
            self.classifier = nn.Linear(p.hidden, num_classes)
        self.instance_heads = nn.ModuleList(
            nn.Linear(p.hidden, 2) for _ in range(num_classes)
        )

    def forward(self, bag: Tensor, label: Tensor | int | None = None) -> MILOutput:
        h = self.fc(self.check_bag(bag))
        a = torch.softmax(self.attention(h), dim=1)  # (K, N)
        z = a @ h  # (K, H)
        if self.multi_branch:
            logits = torch.cat([head(z[c]) for c, head in enumerate(self.bag_heads)])
            logits = logits.view(1, -1)
        else:
            logits = self.classifier(z)
        aux = self.zero(h)
        if self.training and label is not None and self.p.bag_weight < 1.0:
            w = self.p.bag_weight
            aux = (1.0 - w) / w * self.instance_loss(h, a, label_index(label))
        return MILOutput(logits, a, aux, z.mean(0, keepdim=True))

    def instance_loss(self, h: Tensor, a: Tensor, y: int) -> Tensor:
        """CLAM's instance clustering loss for true class ``y`` (see class doc)."""
        k = min(self.p.k_sample, h.shape[0] // 2)
        if k == 0:
            return self.zero(h)
        total, terms = self.zero(h), 0
        for c, head in enumerate(self.instance_heads):
            row = a[c if self.multi_branch else 0]
            top = torch.topk(row, k).indices
            if c == y:
                bottom = torch.topk(-row, k).indices
                idx = torch.cat([top, bottom])
                target = torch.cat([h.new_ones(k), h.new_zeros(k)]).long()
            elif self.p.subtyping:
                idx, target = top, h.new_zeros(k).long()
            else:
                continue
            total = total + F.cross_entropy(head(h[idx]), target)
            terms += 1
        return total / terms if self.p.subtyping else total


@MIL_MODELS.register("abmil", params=ABMILParams)
def abmil(p: ABMILParams, in_dim: int, num_classes: int) -> MILModel:
    """Gated-attention MIL (Ilse et al. 2018), CLAM-style fc reduction."""
    return ABMIL(p, in_dim, num_classes)


@MIL_MODELS.register("clam_sb", params=CLAMParams)
def clam_sb(p: CLAMParams, in_dim: int, num_classes: int) -> MILModel:
    """CLAM single-branch with instance clustering (Lu et al. 2021)."""
    return CLAM(p, in_dim, num_classes, multi_branch=False)


@MIL_MODELS.register("clam_mb", params=CLAMParams)
def clam_mb(p: CLAMParams, in_dim: int, num_classes: int) -> MILModel:
    """CLAM multi-branch (one attention branch per class), instance clustering."""
    return CLAM(p, in_dim, num_classes, multi_branch=True)


class ACMIL(MILModel):
    r"""Attention-challenging MIL (Zhang et al., ECCV 2024), gated-attention form.

    ``h = ReLU(W x)`` (no bias), gated attention with ``M = n_token`` branches
    (multiple-branch attention, MBA). Training only, STKIM: in every branch the
    ``n_masked_patch`` highest logits are found and a random
    ``int(n_masked_patch * mask_drop)`` of them set to ``-1e9``, so the model
    cannot rest on a few dominant patches. Branch ``m`` pools
    :math:`z_m = \mathrm{softmax}(A_m) h` into its own linear head (sub-
    predictions); the slide prediction pools with the mean branch attention,
    :math:`\bar a = \frac1M\sum_m \mathrm{softmax}(A_m)`, through a separate
    linear head. ``aux_loss = CE(sub_preds, y) [M > 1] + mean_{i<j}
    cos(softmax(A_i), softmax(A_j))`` (the MBA diversity term); the slide CE is
    the training loop's. ``n_token=1, n_masked_patch=0`` is ABMIL.
    """

    def __init__(self, p: ACMILParams, in_dim: int, num_classes: int) -> None:
        super().__init__(in_dim, num_classes)
        self.p = p
        self.fc = feature_reduction(in_dim, p.hidden, p.dropout, bias=False)
        self.attention = GatedAttention(p.hidden, p.attn_dim, p.n_token, p.dropout)
        self.sub_heads = nn.ModuleList(
            nn.Linear(p.hidden, num_classes) for _ in range(p.n_token)
        )
        self.classifier = nn.Linear(p.hidden, num_classes)

    def stkim(self, logits: Tensor) -> Tensor:
        """Mask a random subset of each branch's top-k attention logits."""
        k = min(self.p.n_masked_patch, logits.shape[1])
        drop = int(k * self.p.mask_drop)  # < k, so a branch keeps a patch
        if drop == 0:
            return logits
        top = torch.topk(logits, k, dim=1).indices  # (M, k)
        pick = torch.rand(top.shape, device=logits.device).argsort(dim=1)[:, :drop]
        masked = top.gather(1, pick)
        mask = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, masked, True)
        return logits.masked_fill(mask, -1e9)

    def forward(self, bag: Tensor, label: Tensor | int | None = None) -> MILOutput:
        h = self.fc(self.check_bag(bag))
        logits_a = self.attention(h)  # (M, N)
        if self.training and self.p.n_masked_patch > 0:
            logits_a = self.stkim(logits_a)
        a = torch.softmax(logits_a, dim=1)
        z = a @ h  # (M, H)
        sub = torch.stack([head(z[m]) for m, head in enumerate(self.sub_heads)])
        slide_z = a.mean(0, keepdim=True) @ h
        logits = self.classifier(slide_z)
        aux = self.zero(h)
        if self.training and label is not None and self.p.n_token > 1:
            y = torch.full((self.p.n_token,), label_index(label), device=h.device)
            pairs = list(itertools.combinations(range(self.p.n_token), 2))
            i, j = (torch.tensor(t, device=h.device) for t in zip(*pairs, strict=True))
            diversity = F.cosine_similarity(a[i], a[j], dim=1).mean()
            aux = F.cross_entropy(sub, y) + diversity
        return MILOutput(logits, a, aux, slide_z)


@MIL_MODELS.register("acmil", params=ACMILParams)
def acmil(p: ACMILParams, in_dim: int, num_classes: int) -> MILModel:
    """ACMIL: multi-branch attention, STKIM masking, diversity loss (2024)."""
    return ACMIL(p, in_dim, num_classes)
