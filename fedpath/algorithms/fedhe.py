r"""FedHE: heterogeneous models, only per-class mean logits cross the network.

The FedHD paper's FedHE baseline, as the FedWSIDD repository implements it
(``model/FedHE/FedHE{Client,Server}.py``). Every client keeps its own MIL model
(any registered architecture, chosen per client in ``models``); no weights are
exchanged. Client :math:`k` trains on its real slides with

.. math:: \mathcal L = \mathcal L_{MIL}(x, y) + \lambda_{proto}\,
          \mathrm{MSE}\big(s(x), \bar s_y\big)

(:math:`\lambda_{proto}` = ``ld_proto`` = 0.1; MSE averaged over the ``C``
logits; the term only where class :math:`y` has a global mean) and uploads the
per-class mean of its bag logits :math:`s` over the bags of its **last** local
epoch. The server's global mean of class :math:`c` is the unweighted mean over
the clients that saw class :math:`c`. Round 1 has no global means, so it is plain
local training.

Deviations from the reference code: the uploaded logits are detached (the
reference stores them with their autograd graph, which only costs memory);
bags the loop sees in training mode (dropout on) give the logits, as in the
reference. Group ``class_logits`` (up) holds ``logits`` ``(C, C)`` and
``count`` ``(C,)`` bags per class (0: class absent, its row is zero); group
``global_logits`` (down) the same with ``count`` the number of clients.
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
    ServerAlgorithm,
    ServerContext,
    register_algorithm,
    weighted_mean_scalars,
)
from fedpath.algorithms.mil_common import (
    OwnMILClient,
    architecture,
    keep_model,
    own_model,
    real_bags,
)
from fedpath.algorithms.names import FIT
from fedpath.mil.models import MILModel
from fedpath.params.mil_baselines import FedHEParams
from fedpath.types import ArrayDict, ClientState, Payload, Scalar
from fedpath.wire import Wire

#: a client's per-class mean bag logits (up)
CLASS_LOGITS = "class_logits"
#: the server's mean over clients (down, and server state)
GLOBAL_LOGITS = "global_logits"


def proto_term(logits: Tensor, label: int, global_logits: ArrayDict | None) -> Tensor:
    """MSE between a bag's logits ``(1, C)`` and its class's global mean (0 when
    there is none yet or no client saw the class)."""
    if global_logits is None or global_logits["count"][label] <= 0:
        return logits.new_zeros(())
    target = torch.as_tensor(global_logits["logits"][label]).to(logits)
    return F.mse_loss(logits.reshape(-1), target)


def class_means(sums: Tensor, counts: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``(C, C)`` mean logits per class (zero rows where absent) and the counts."""
    mean = sums / counts.clamp_min(1)[:, None]
    return mean.numpy().astype(np.float32), counts.numpy().astype(np.int64)


def server_mean(uploads: Sequence[ArrayDict]) -> ArrayDict:
    """Unweighted mean over the clients that saw each class; ``count``: how many."""
    logits = np.stack([u["logits"] for u in uploads]).astype(np.float64)
    seen = np.stack([u["count"] > 0 for u in uploads])  # (K, C)
    n = seen.sum(0)
    total = (logits * seen[:, :, None]).sum(0)
    mean = total / np.maximum(n, 1)[:, None]
    return {"logits": mean.astype(np.float32), "count": n.astype(np.int64)}


class FedHEClient(OwnMILClient):
    """Train the own model with the logit-prototype term; upload class means."""

    params: FedHEParams

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage != FIT:
            raise ProtocolError(f"fedhe has no stage {stage!r}")
        p, ctx = self.params, self.ctx
        real = real_bags(ctx)
        model = own_model(ctx, state, p)
        glob = payload.arrays.get(GLOBAL_LOGITS)
        c = ctx.num_classes
        sums, counts = torch.zeros(c, c), torch.zeros(c)

        def loss(
            m: MILModel, features: Tensor, label: Tensor, synthetic: bool
        ) -> dict[str, Tensor]:
            out = m(features, label)
            y = int(label.reshape(-1)[0])
            sums[y] += out.logits.detach().reshape(-1).cpu()
            counts[y] += 1
            mil = ctx.bag_cross_entropy(out.logits, label) + out.aux_loss
            proto = proto_term(out.logits, y, glob)
            return {
                "loss": mil + p.ld_proto * proto,
                "loss_real": mil.detach(),
                "proto": proto.detach(),
            }

        epochs = ctx.train.local_epochs

        def on_epoch(done: int, total: int) -> None:
            if done < epochs:  # only the last epoch's logits are uploaded
                sums.zero_()
                counts.zero_()
            if ctx.on_epoch is not None:
                ctx.on_epoch(done, total)

        scalars: dict[str, Any] = ctx.task.bags().fit(
            model,
            real,
            loss,
            seed=ctx.seed_for("mil"),
            round_idx=ctx.round,
            on_epoch=on_epoch,
        )
        keep_model(state, model, architecture(ctx, p.models) or "")
        mean, count = class_means(sums, counts)
        return Payload(
            {CLASS_LOGITS: {"logits": mean, "count": count}},
            {"num_examples": len(real), **scalars},
        )


class FedHEServer(ServerAlgorithm[FedHEParams]):
    """Average the clients' per-class mean logits; broadcast them."""

    def __init__(self, params: FedHEParams, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.global_logits: ArrayDict | None = None

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        if stage != FIT:
            raise ProtocolError(f"fedhe has no stage {stage!r}")
        arrays = {GLOBAL_LOGITS: self.global_logits} if self.global_logits else {}
        return {c: Payload(dict(arrays), {"round": rnd}) for c in clients}

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if not replies:
            raise ProtocolError(f"round {rnd}: no client replied to stage {stage!r}")
        self.global_logits = server_mean(
            [replies[c].group(CLASS_LOGITS) for c in sorted(replies)]
        )
        out = weighted_mean_scalars(replies)
        out["classes_seen"] = int((self.global_logits["count"] > 0).sum())
        return out

    def state(self) -> Payload:
        return Payload(
            {GLOBAL_LOGITS: self.global_logits} if self.global_logits else {}
        )

    def load_state(self, state: Payload) -> None:
        self.global_logits = (
            dict(state.arrays[GLOBAL_LOGITS]) if GLOBAL_LOGITS in state.arrays else None
        )


register_algorithm(
    "fedhe",
    FedHEClient,
    FedHEServer,
    FedHEParams,
    "FedHE: own MIL models; only per-class mean bag logits exchanged (MSE pull)",
    data="bags",
    wire=Wire("per-class mean bag logits", {"fit": "statistics"}),
)
