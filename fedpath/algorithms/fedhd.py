r"""FedHD: one-shot federated distillation of whole slides (design points 1-3).

Round 1 has two stages and no model parameters cross the network:

1. ``distill``: every client fits a ``components``-component Gaussian mixture to
   each of its real slides and distils it into one synthetic slide of ``tokens``
   embeddings (:func:`fedpath.mil.distill.distill_slides`; ``many_to_one > 0``:
   :func:`~fedpath.mil.distill.compress_slides` instead) and uploads only those,
   with their labels and its declared embedding space. The server checks that
   every client lives in one space (embeddings of different extractors are not
   comparable) and pools the slides; with ``spaces: adapt`` it accepts clients
   of different extractors (``features``, per client) and sends each receiver
   the others' slides grouped by space, and the receiver trains one input
   adapter per foreign space with its model (:mod:`fedpath.mil.adapters`,
   docs/fedhd_heterogeneous.md).
2. ``fit``: each client receives the synthetic slides of every *other* client and
   trains its own MIL model (any registered architecture, chosen per client in
   ``models``) with the curriculum :math:`\mathcal L = \mathcal L_{real} +
   \mathcal L_{GCE}\,\mathbb 1(t \ge t_0)` (:func:`fedpath.tasks.bags.fit_bags`).

Later rounds (if ``train.rounds > 1``) continue local training with the same
synthetic slides. Each client keeps and deploys its own model, so runs use
``evaluation.protocol: local``.

Ablations (paper, Table "ablation") are parameters: ``components: 1`` (one
Gaussian), ``mode: mean`` (FedWSIDD-style mean matching, the baseline),
``many_to_one``, ``curriculum: false`` (direct mix), ``loss_synthetic: ce``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

import torch.nn.functional as F
from torch import Tensor

from fedpath.algorithms.base import register_algorithm
from fedpath.algorithms.distill_server import PoolServer
from fedpath.algorithms.mil_common import (
    DistillFitClient,
    architecture,
    keep_model,
    own_model,
    real_bags,
    train_bags,
)
from fedpath.algorithms.mil_spaces import (
    keep_adapters,
    keep_spaced,
    spaced_bags,
    with_adapters,
)
from fedpath.algorithms.names import RECEIVED
from fedpath.config import ConfigError
from fedpath.losses import generalized_cross_entropy
from fedpath.mil.bags import SlideBag
from fedpath.mil.distill import DistillOptions, compress_slides, distill_slides
from fedpath.params.mil_train import FedHDParams
from fedpath.types import ClientState, Payload, Scalar
from fedpath.wire import Wire

log = logging.getLogger("fedpath")


class FedHDClient(DistillFitClient):
    """Distil own slides; train own MIL model on real + others' synthetic slides."""

    params: FedHDParams
    method = "FedHD"

    def synthetic_loss(self, logits: Tensor, label: Tensor) -> Tensor:
        """The noise-robust generalised cross-entropy (1 - p_y^q)/q on the slide
        logits of a synthetic slide (``loss_synthetic: ce``: the ablation)."""
        if self.params.loss_synthetic == "gce":
            return generalized_cross_entropy(logits, label, self.params.q)
        return F.cross_entropy(logits, label)

    def distill(self) -> Payload:
        from fedpath.mil.privacy import guard_tokens

        p, ctx = self.params, self.ctx
        every = real_bags(ctx)
        real = [b for b in every if b.num_patches >= p.min_patches]
        withheld = len(every) - len(real)
        if withheld:
            log.warning(
                "client %s: %d of %d slides have fewer than %d patches "
                "(algorithm.params.min_patches) and are not distilled: too small "
                "for a synthetic slide to hide their patches",
                ctx.client_id,
                withheld,
                len(every),
                p.min_patches,
            )
        seed = ctx.seed_for("distill") % (2**31)
        if not real:
            return self.synthetic_reply([], {}, withheld)
        opts = DistillOptions(
            components=1 if p.mode != "gmm" else p.components,
            covariance=p.covariance,
            tokens=p.tokens,
            iters=p.iters,
            lr=p.distill_lr,
            mode=p.mode,
        )
        if p.many_to_one:  # starts from init "auto" whatever p.init says
            synthetic = compress_slides(real, p.many_to_one, opts, seed=seed)
        else:
            synthetic = distill_slides(
                real, replace(opts, init=p.init), seed=seed, too_few=p.too_few
            )
        synthetic, report = guard_tokens(synthetic, every, p.min_token_distance, seed)
        return self.synthetic_reply(synthetic, report, withheld)

    def received(self, state: ClientState) -> list[SlideBag]:
        """The others' synthetic slides kept in ``state``; with ``spaces: adapt``
        those of a foreign space carry its name (:attr:`SlideBag.space`)."""
        prefix = f"{self.ctx.client_id}-recv"
        return spaced_bags(self.ctx, state, RECEIVED, "others", prefix)

    def fit(self, payload: Payload, state: ClientState) -> Payload:
        p, ctx = self.params, self.ctx
        real = real_bags(ctx)
        keep_spaced(payload, state, RECEIVED)  # round 1: kept for later rounds
        others = self.received(state)
        model = own_model(ctx, state, p)
        net = with_adapters(ctx, p, model, others, state)
        epochs = ctx.train.local_epochs
        if p.curriculum and others and p.t0 >= epochs * ctx.train.rounds:
            raise ConfigError(
                f"config key 'algorithm.params.t0': {p.t0} is not below the "
                f"{epochs * ctx.train.rounds} local epochs, so the synthetic slides "
                "would never be used; lower t0 or raise train.local_epochs"
            )
        # the curriculum counts epochs across rounds
        done = int(state.scalars.get("epochs_done", 0))
        scalars = train_bags(
            ctx,
            net,
            real,
            others,
            synthetic_from=max(0, p.t0 - done) if p.curriculum else 0,
            synthetic_loss=self.synthetic_loss,
        )
        state.scalars["epochs_done"] = done + epochs
        keep_model(state, model, architecture(ctx, p.models) or "")
        scalars.update(keep_adapters(state, net))  # deployed: `model` alone
        return Payload({}, {"num_examples": len(real), **scalars})


class FedHDServer(PoolServer[FedHDParams]):
    """Pool the synthetic slides; send each client the others'; no averaging."""

    method = title = "FedHD"
    why = "synthetic slides of different feature extractors are not comparable"

    def accept_synthetic(
        self, replies: Mapping[str, Payload], spaces: Mapping[str, str]
    ) -> dict[str, Scalar]:
        out = super().accept_synthetic(replies, spaces)
        if self.params.adapt:
            out["embedding_spaces"] = len(set(spaces.values()))
        return out


register_algorithm(
    "fedhd",
    FedHDClient,
    FedHDServer,
    FedHDParams,
    "FedHD: one-shot GMM-aligned synthetic slides, own MIL model, curriculum + GCE",
    data="bags",
    wire=Wire(
        "synthetic slides (distilled embeddings) and their labels",
        {"distill": "synthetic data", "fit": "metrics"},
        caps={"tokens": "max_tokens"},
    ),
)
