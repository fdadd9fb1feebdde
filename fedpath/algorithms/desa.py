r"""DESA: shared synthetic anchors, logit distillation on them, anchor contrast.

The FedHD paper's DESA baseline as the FedWSIDD repository sets it up
(``model/FedDESA/FedDESARunner.py``; DESA: Huang et al., ICML 2024). Own MIL
models (any architecture per client); no weights cross the network.

1. ``distill`` (round 1): every client distils ``anchors_per_class`` synthetic
   slides per class of ``tokens`` embeddings by **mean matching** of the class's
   pooled patches (fedpath's FedWSIDD-style matching,
   :func:`fedpath.mil.distill.compress_slides` with ``mode="mean"``), keeps them
   ``min_token_distance`` x the median patch gap from its real patches
   (:func:`fedpath.mil.privacy.guard_tokens`) and uploads only them. The server
   averages the clients' same-index slides of each class element-wise (over the
   clients that have the class; FedWSIDD's "mixup") into one global anchor set.
2. ``fit``: client :math:`k` trains on its real slides and the anchors with

   .. math:: \mathcal L = \mathcal L_{MIL}(x, y) + w_{KD}\,\mathcal L_{KD}
             + w_{REG}\,\mathcal L_{REG}

   :math:`\mathcal L_{KD} = 0.1\,\mathrm{CE}(s, y_a) + 0.9\,T^2\,
   \mathrm{KL}(\mathrm{softmax}(\bar t/T)\,\Vert\,\mathrm{softmax}(s/T))` on the
   next anchor :math:`a` of a cycle through the anchors (:math:`T = 20`; the KL
   is ``nn.KLDivLoss()``'s, a mean over the ``C`` elements), :math:`s` the
   client's logits on :math:`a` and :math:`\bar t` the mean logits of the
   **other** clients' models on :math:`a`; :math:`\mathcal L_{REG}` is SupCon
   (:math:`\tau = 0.07`, cosine) over the slide embeddings of the training bag
   and of random anchors (``reg_anchors``). After training each client uploads
   its model's (eval-mode) logits on every anchor; the server sends each client
   the mean of the others' for the next round. Round 1 has no teacher logits yet,
   so it trains with :math:`\mathcal L_{MIL} + \mathcal L_{REG}`.

Deviations from the reference code, each on purpose:

- **KD updates the distilled models.** The reference builds its KD optimisers
  over the *pre-trained* models' parameters, so the models it distils are never
  updated and its reported DESA numbers come from a plain fine-tune on real +
  anchors (≈ FedWSIDD). Here the model that computes :math:`s` is the one stepped.
- **The regulariser acts.** The reference's SupCon runs on a batch of two (the
  training bag and one random anchor): each sample's only contrast is the other,
  so the loss is identically 0 whatever the labels. ``reg_anchors: per_class``
  (default) adds one random anchor of every class, so the same-class anchor is a
  positive against the others; ``one`` keeps the reference's batch.
- Teacher logits come from each client's model at the end of the previous round
  (the reference recomputes them at the start of each KD round from the same,
  unchanged models: the same values), so no extra stage is needed.
- The anchors are mean-matched in embedding space (fedpath distils embeddings,
  not pixels through a ResNet-50); a class slide whose guard dropped tokens is
  averaged over the common prefix of tokens.

**Clients of different feature extractors** (``spaces: adapt``, beyond the
reference, which assumes one extractor; docs/fedhd_heterogeneous.md): anchors of
different spaces cannot be averaged, so the server mixes the anchors *within*
each embedding space (with one client per space, that client's own anchors) and
sends every client the whole set, one stack per space. A client meets the
anchors of a foreign space through an input adapter per space
(:class:`fedpath.mil.adapters.AdaptedMIL`, trained with its model); every client
scores every anchor, so the teacher logits are defined as in one space.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fedpath.algorithms.base import (
    ProtocolError,
    ServerContext,
    register_algorithm,
)
from fedpath.algorithms.distill_server import DistillFitServer
from fedpath.algorithms.mil_common import (
    DistillFitClient,
    architecture,
    arrays_to_bags,
    bags_to_arrays,
    keep_model,
    own_model,
    real_bags,
    spaced_to_arrays,
)
from fedpath.algorithms.mil_spaces import (
    SPACE_PREFIX,
    keep_adapters,
    keep_spaced,
    spaced_bags,
    with_adapters,
)
from fedpath.algorithms.names import SYNTHETIC
from fedpath.config import ConfigError
from fedpath.losses import supcon_loss
from fedpath.mil.bags import SlideBag
from fedpath.mil.models import MILModel
from fedpath.params.mil_baselines import DESAParams
from fedpath.tasks.bags import bag_inputs
from fedpath.types import ArrayDict, ClientState, Payload, Scalar
from fedpath.wire import Wire

#: the global anchor set (fit broadcast of round 1; client and server state)
ANCHORS = "anchors"
#: a client's model's logits on every anchor (fit reply)
ANCHOR_LOGITS = "anchor_logits"
#: the mean of the other clients' anchor logits (fit broadcast, rounds > 1)
TEACHER = "teacher"


def kd_loss(
    student: Tensor,
    teacher: Tensor,
    label: Tensor,
    temperature: float = 20.0,
    ce_weight: float = 0.1,
) -> Tensor:
    """DESA's ``calculate_kd_loss``: ``ce_weight`` CE(s, y) + (1 - ``ce_weight``)
    T^2 KLDiv(log_softmax(s/T), softmax(t/T)), the KL averaged over elements
    (``nn.KLDivLoss()``'s default reduction)."""
    soft_t = F.softmax(teacher / temperature, dim=1)
    log_s = F.log_softmax(student / temperature, dim=1)
    # nn.KLDivLoss()(log_s, soft_t): sum_c t (log t - log s), averaged over elements
    kl = (torch.special.xlogy(soft_t, soft_t) - soft_t * log_s).mean()
    ce = F.cross_entropy(student, label)
    return ce_weight * ce + (1.0 - ce_weight) * temperature**2 * kl


def teacher_logits(uploads: Mapping[str, np.ndarray], client: str) -> np.ndarray | None:
    """Mean of every other client's anchor logits (None: no other client)."""
    others = [uploads[c] for c in sorted(uploads) if c != client]
    if not others:
        return None
    return np.mean(np.stack(others), axis=0).astype(np.float32)


def mix_anchors(per_client: Sequence[Sequence[SlideBag]]) -> list[SlideBag]:
    """FedWSIDD's server "mixup": for each class and index ``i``, the element-wise
    mean of the clients' ``i``-th synthetic slides of that class (over the clients
    that have the class, on their common number of tokens)."""
    classes = sorted({b.label for bags in per_client for b in bags})
    out = []
    for c in classes:
        lists = [[b for b in bags if b.label == c] for bags in per_client]
        lists = [bags for bags in lists if bags]
        for i in range(min(len(bags) for bags in lists)):
            feats = [bags[i].features for bags in lists]
            n = min(len(f) for f in feats)
            mean = torch.stack([f[:n] for f in feats]).float().mean(0)
            out.append(SlideBag(f"anchor-class{c}-{i}", mean, c, "anchors"))
    return out


class DESAClient(DistillFitClient):
    """Distil class anchors once; train with KD and SupCon on the anchors."""

    params: DESAParams
    method = "desa"

    def distill(self) -> Payload:
        from fedpath.mil.distill import DistillOptions, compress_slides
        from fedpath.mil.privacy import guard_tokens

        p, ctx = self.params, self.ctx
        real = real_bags(ctx)
        opts = DistillOptions(
            components=1,
            tokens=p.tokens,
            iters=p.iters,
            lr=p.distill_lr,
            mode="mean",
        )
        seed = ctx.seed_for("distill") % (2**31)
        syn = compress_slides(real, p.anchors_per_class, opts, seed=seed)
        syn, report = guard_tokens(syn, real, p.min_token_distance, seed)
        return self.synthetic_reply(syn, report)

    def fit(self, payload: Payload, state: ClientState) -> Payload:
        p, ctx = self.params, self.ctx
        keep_spaced(payload, state, ANCHORS)
        if ANCHORS not in state.arrays:
            raise ProtocolError(f"client {ctx.client_id}: no DESA anchors received")
        anchors = spaced_bags(ctx, state, ANCHORS, "anchors", "anchor")
        teacher = payload.arrays.get(TEACHER, {}).get("logits")
        real = real_bags(ctx)
        model = own_model(ctx, state, p)
        net = with_adapters(ctx, p, model, anchors, state)
        loss = self.loss_fn(anchors, teacher)
        scalars: dict[str, Any] = ctx.task.bags().fit(
            net,
            real,
            loss,
            synthetic=anchors,
            seed=ctx.seed_for("mil"),
            round_idx=ctx.round,
            on_epoch=ctx.on_epoch,
        )
        keep_model(state, model, architecture(ctx, p.models) or "")
        scalars.update(keep_adapters(state, net))
        with torch.no_grad():
            logits = torch.cat(
                [net(bag_inputs(net, b, ctx.device)).logits.cpu() for b in anchors]
            )
        return Payload(
            {ANCHOR_LOGITS: {"logits": logits.numpy().astype(np.float32)}},
            {"num_examples": len(real), **scalars},
        )

    def loss_fn(self, anchors: Sequence[SlideBag], teacher: np.ndarray | None) -> Any:
        """The per-bag DESA loss (module docstring); KD only with ``teacher``."""
        p, ctx = self.params, self.ctx
        gen = torch.Generator().manual_seed(ctx.seed_for("desa") % (2**63))
        order = torch.randperm(len(anchors), generator=gen).tolist()
        by_class: dict[int, list[int]] = {}
        for i, b in enumerate(anchors):
            by_class.setdefault(b.label, []).append(i)
        t_logits = None if teacher is None else torch.as_tensor(teacher)
        step = [0]

        def pick(choices: Sequence[int]) -> int:
            return choices[int(torch.randint(len(choices), (1,), generator=gen))]

        def loss(
            m: MILModel, features: Tensor, label: Tensor, synthetic: bool
        ) -> dict[str, Tensor]:
            out = m(features, label)
            if synthetic:
                mil = ctx.bag_cross_entropy(out.logits, label)
            else:
                mil = ctx.bag_cross_entropy(out.logits, label) + out.aux_loss
            total = mil
            terms = {"loss_synthetic" if synthetic else "loss_real": mil.detach()}
            dev = out.logits.device
            if t_logits is not None and p.kd_weight > 0:
                i = order[step[0] % len(order)]
                step[0] += 1
                a = anchors[i]
                s = m(bag_inputs(m, a, dev)).logits
                y_a = torch.tensor([a.label], device=dev)
                kd = kd_loss(s, t_logits[i : i + 1].to(s), y_a, p.temperature, p.kd_ce)
                total = total + p.kd_weight * kd
                terms["kd"] = kd.detach()
            if p.reg_weight > 0:
                if p.reg_anchors == "one":
                    picks = [pick(range(len(anchors)))]
                else:
                    picks = [pick(by_class[c]) for c in sorted(by_class)]
                embs = [self.embedding(out.embedding)]
                embs += [self.embedding(m(bag_inputs(m, anchors[j], dev)).embedding)
                         for j in picks]  # fmt: skip
                labels = torch.tensor(
                    [int(label.reshape(-1)[0])] + [anchors[j].label for j in picks],
                    device=dev,
                )
                reg = supcon_loss(
                    torch.cat(embs), labels, temperature=p.reg_temperature
                )
                total = total + p.reg_weight * reg
                terms["reg"] = reg.detach()
            return {"loss": total, **terms}

        return loss

    def embedding(self, emb: Tensor | None) -> Tensor:
        if emb is None:
            raise ConfigError(
                f"client {self.ctx.client_id}: DESA's SupCon regulariser needs a "
                "MIL model that returns a slide embedding; set "
                "algorithm.params.reg_weight=0 for this architecture"
            )
        return emb.reshape(1, -1)


class DESAServer(DistillFitServer[DESAParams]):
    """Mix the clients' synthetic slides into anchors; relay the others' logits."""

    method, title = "desa", "DESA"
    why = "their synthetic slides cannot be averaged"

    def __init__(self, params: DESAParams, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.anchors: ArrayDict | None = None
        #: ``space/<i>`` names of the anchor stacks (``spaces: adapt``)
        self.anchor_spaces: dict[str, Scalar] = {}
        self.logits: dict[str, np.ndarray] = {}

    def configure_fit(self, rnd: int, clients: Sequence[str]) -> dict[str, Payload]:
        """Round 1: the anchors; every round after the first ``fit``: the mean
        of the other clients' anchor logits."""
        out = {}
        for c in clients:
            arrays: dict[str, ArrayDict] = {}
            scalars: dict[str, Scalar] = {"round": rnd}
            if rnd == 1 and self.anchors is not None:
                arrays[ANCHORS] = self.anchors
                scalars.update(self.anchor_spaces)
            t = teacher_logits(self.logits, c)
            if t is not None:
                arrays[TEACHER] = {"logits": t}
            out[c] = Payload(arrays, scalars)
        return out

    def accept_fit(self, replies: Mapping[str, Payload]) -> None:
        self.logits = {c: r.group(ANCHOR_LOGITS)["logits"] for c, r in replies.items()}

    def accept_synthetic(
        self, replies: Mapping[str, Payload], spaces: Mapping[str, str]
    ) -> dict[str, Scalar]:
        """Mix the slides into anchors within each embedding space."""
        by_space: dict[str, list[list[SlideBag]]] = {}
        for c in sorted(replies):
            bags = arrays_to_bags(replies[c].group(SYNTHETIC), c, c)
            by_space.setdefault(spaces[c], []).append(bags)
        mixed = [(s, mix_anchors(by_space[s])) for s in sorted(by_space)]
        if self.params.adapt:  # one stack per space, mixed within it
            parts = [(s, bags_to_arrays(a)) for s, a in mixed]
            self.anchors, self.anchor_spaces = spaced_to_arrays(parts)
        else:
            one = mixed[0][1] if mixed else []
            self.anchors, self.anchor_spaces = bags_to_arrays(one), {}
        return {
            "anchors": sum(len(a) for _, a in mixed),
            "synthetic_bytes": self.anchors_bytes(),
        }

    def anchors_bytes(self) -> int:
        return sum(int(a.nbytes) for a in (self.anchors or {}).values())

    def state(self) -> Payload:
        arrays: dict[str, ArrayDict] = {}
        if self.anchors is not None:
            arrays[ANCHORS] = self.anchors
        ids = self.ctx.client_ids
        owners = [c for c in ids if c in self.logits]
        if owners:
            arrays[ANCHOR_LOGITS] = {
                "logits": np.stack([self.logits[c] for c in owners]),
                "owner": np.array([ids.index(c) for c in owners], np.int64),
            }
        return Payload(arrays, dict(self.anchor_spaces))

    def load_state(self, state: Payload) -> None:
        self.anchors = state.arrays.get(ANCHORS)
        self.anchor_spaces = {
            k: v for k, v in state.scalars.items() if k.startswith(SPACE_PREFIX)
        }
        group = state.arrays.get(ANCHOR_LOGITS)
        self.logits = {}
        if group is not None:
            for i, row in zip(group["owner"].tolist(), group["logits"], strict=True):
                self.logits[self.ctx.client_ids[i]] = row


register_algorithm(
    "desa",
    DESAClient,
    DESAServer,
    DESAParams,
    "DESA: mean-matched synthetic anchors, others' logits distilled on them, SupCon",
    data="bags",
    wire=Wire(
        "synthetic anchor slides (distilled embeddings) and logits on them",
        {"distill": "synthetic data", "fit": "statistics"},
    ),
)
