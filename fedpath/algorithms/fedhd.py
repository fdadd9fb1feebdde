r"""FedHD: one-shot federated distillation of whole slides (design points 1-3).

Round 1 has two stages and no model parameters cross the network:

1. ``distill``: every client fits a ``components``-component Gaussian mixture to
   each of its real slides and distils it into one synthetic slide of ``tokens``
   embeddings (:func:`fedpath.mil.distill.distill_slides`; ``many_to_one > 0``:
   :func:`~fedpath.mil.distill.compress_slides` instead) and uploads only those,
   with their labels and its declared embedding space. The server checks that
   every client lives in one space (embeddings of different extractors are not
   comparable) and pools the slides.
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
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import torch.nn.functional as F
from torch import Tensor

from fedpath.algorithms.base import (
    ProtocolError,
    ServerAlgorithm,
    ServerContext,
    register_algorithm,
    round_only,
    weighted_mean_scalars,
)
from fedpath.algorithms.mil_common import (
    OwnMILClient,
    architecture,
    arrays_to_bags,
    bags_to_arrays,
    embedding_space,
    keep_model,
    own_model,
    real_bags,
    train_bags,
)
from fedpath.algorithms.names import DISTILL, FIT, POOL, RECEIVED, SYNTHETIC
from fedpath.config import ConfigError
from fedpath.losses import generalized_cross_entropy
from fedpath.mil.distill import DistillOptions, compress_slides, distill_slides
from fedpath.params.algorithms import FedHDParams
from fedpath.types import ArrayDict, ClientState, Payload, Scalar

log = logging.getLogger("fedpath")


class FedHDClient(OwnMILClient):
    """Distil own slides; train own MIL model on real + others' synthetic slides."""

    params: FedHDParams

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage == DISTILL:
            return self.distill()
        if stage == FIT:
            return self.fit(payload, state)
        raise ProtocolError(f"FedHD has no stage {stage!r}")

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
        space, dim = embedding_space(ctx)
        if not real:
            return Payload(
                {SYNTHETIC: bags_to_arrays([])},
                {
                    "embedding_space": space,
                    "dim": dim,
                    "num_slides": 0,
                    "slides_withheld": withheld,
                },
            )
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
        return Payload(
            {SYNTHETIC: bags_to_arrays(synthetic)},
            {
                "embedding_space": space,
                "dim": dim,
                "num_slides": len(synthetic),
                "slides_withheld": withheld,
                **report,
            },
        )

    def fit(self, payload: Payload, state: ClientState) -> Payload:
        p, ctx = self.params, self.ctx
        real = real_bags(ctx)
        if RECEIVED in payload.arrays:  # round 1: keep them for later rounds
            state.arrays[RECEIVED] = payload.arrays[RECEIVED]
        others = (
            arrays_to_bags(state.arrays[RECEIVED], "others", f"{ctx.client_id}-recv")
            if RECEIVED in state.arrays
            else []
        )
        model = own_model(ctx, state, p)
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
            model,
            real,
            others,
            synthetic_from=max(0, p.t0 - done) if p.curriculum else 0,
            synthetic_loss=self.synthetic_loss,
        )
        state.scalars["epochs_done"] = done + epochs
        keep_model(state, model, architecture(ctx, p.models) or "")
        return Payload({}, {"num_examples": len(real), **scalars})


class FedHDServer(ServerAlgorithm):
    """Pool the synthetic slides; send each client the others'; no averaging."""

    params: FedHDParams

    def __init__(self, params: FedHDParams, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.pool: dict[str, ArrayDict] = {}

    def stages(self, rnd: int) -> Sequence[str]:
        return (DISTILL, FIT) if rnd == 1 else (FIT,)

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        if stage == DISTILL:
            return round_only(clients, rnd)
        if stage != FIT:
            raise ProtocolError(f"FedHD has no stage {stage!r}")
        if rnd > 1:  # clients kept what they received in round 1
            return round_only(clients, rnd)
        return {
            c: Payload({RECEIVED: self._others(c)}, {"round": rnd}) for c in clients
        }

    def _others(self, client: str) -> ArrayDict:
        """Every other client's synthetic slides, stacked."""
        parts = [self.pool[c] for c in sorted(self.pool) if c != client]
        if not parts:
            return bags_to_arrays([])
        return {
            k: np.concatenate([part[k] for part in parts])
            for k in ("features", "sizes", "labels")
        }

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if stage == FIT:
            return weighted_mean_scalars(replies)
        spaces = {
            c: (str(r.scalars["embedding_space"]), int(r.scalars["dim"]))
            for c, r in replies.items()
        }
        if len(set(spaces.values())) > 1:
            listing = ", ".join(f"{c}: {s} (D={d})" for c, (s, d) in spaces.items())
            raise ConfigError(
                "FedHD clients declare different embedding spaces; synthetic slides "
                "of different feature extractors are not comparable. Clients: "
                f"{listing}"
            )
        self.pool = {c: dict(r.group(SYNTHETIC)) for c, r in replies.items()}
        n = sum(int(r.scalars["num_slides"]) for r in replies.values())
        nbytes = sum(r.nbytes() for r in replies.values())
        out: dict[str, Scalar] = {"synthetic_slides": n, "synthetic_bytes": nbytes}
        for c, r in sorted(replies.items()):  # how close each client's tokens came
            for key in ("nn_ratio_min", "nn_ratio_median", "slides_withheld"):
                if key in r.scalars:
                    out[f"{key}/{c}"] = r.scalars[key]
        return out

    def state(self) -> Payload:
        """The pool as one group: every client's slides stacked in client order,
        ``owner`` (per slide) the position of its client in the run's client ids
        (no client id inside a key)."""
        ids = self.ctx.client_ids
        owners = [c for c in ids if c in self.pool]
        if not owners:
            return Payload()
        stacked = {
            k: np.concatenate([self.pool[c][k] for c in owners])
            for k in ("features", "sizes", "labels")
        }
        stacked["owner"] = np.concatenate(
            [
                np.full(len(self.pool[c]["sizes"]), ids.index(c), np.int64)
                for c in owners
            ]
        )
        return Payload({POOL: stacked})

    def load_state(self, state: Payload) -> None:
        self.pool = {}
        if POOL not in state.arrays:
            return
        group = state.arrays[POOL]
        owner, sizes = group["owner"], group["sizes"]
        row = 0
        for i in dict.fromkeys(owner.tolist()):  # client order, as saved
            mine = owner == i
            n = int(sizes[mine].sum())
            self.pool[self.ctx.client_ids[i]] = {
                "features": group["features"][row : row + n],
                "sizes": sizes[mine],
                "labels": group["labels"][mine],
            }
            row += n


register_algorithm(
    "fedhd",
    FedHDClient,
    FedHDServer,
    FedHDParams,
    "FedHD: one-shot GMM-aligned synthetic slides, own MIL model, curriculum + GCE",
    data="bags",
)
