"""FedAvg (McMahan et al., AISTATS 2017) and the weight-averaging client it shares.

Client: load the global weights (keeping the entries that stay local), train
locally with the algorithm's loss, upload the weights and the example count n_i.
Server: theta <- sum_i n_i theta_i / sum_i n_i over named state_dict entries, with
an explicit BatchNorm-buffer rule (see :mod:`fedpath.algorithms.aggregation`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from fedpath.algorithms.aggregation import weighted_average
from fedpath.algorithms.base import (
    ClientAlgorithm,
    ProtocolError,
    ServerAlgorithm,
    ServerContext,
    register_algorithm,
    weighted_mean_scalars,
)
from fedpath.algorithms.names import FIT, LOCAL, WEIGHTS
from fedpath.params.algorithms import FedAvgParams
from fedpath.types import ArrayDict, ClientState, Payload, Scalar, as_numpy_dict
from fedpath.wire import Wire


class WeightsClient(ClientAlgorithm):
    """Client half of every weight-averaging method (FedAvg, FedProx, FedBN, ...).

    Subclasses change :meth:`loss`, :meth:`local_keys` (entries that keep their
    local value instead of the broadcast one) or :meth:`private_keys` (entries that
    never leave the client), and may use :meth:`begin` for per-round set-up.
    """

    def local_keys(self, model: nn.Module) -> set[str]:
        return set()

    def private_keys(self, model: nn.Module) -> set[str]:
        return set()

    def begin(self, model: nn.Module, payload: Payload, state: ClientState) -> None:
        """Hook run after the global weights are loaded, before local training."""

    def loss(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> dict[str, Any]:
        logits = model(x)
        return {"loss": self.ctx.cross_entropy(logits, y)}

    def upload_scalars(self) -> dict[str, Scalar]:
        return {}

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage != FIT:
            raise ProtocolError(f"{type(self).__name__} has no stage {stage!r}")
        ctx = self.ctx
        model = ctx.build_model().to(ctx.device)
        self.load(model, payload.group(WEIGHTS), state)
        self.begin(model, payload, state)
        scalars = ctx.fit_images(model, self.loss)
        weights = as_numpy_dict(model.state_dict())
        keep = self.local_keys(model) | self.private_keys(model)
        if keep:
            state.arrays[LOCAL] = {k: weights[k] for k in keep}
        for k in self.private_keys(model):
            del weights[k]
        return Payload(
            {WEIGHTS: weights},
            {"num_examples": len(self.ctx.data), **scalars, **self.upload_scalars()},
        )

    def load(self, model: nn.Module, weights: ArrayDict, state: ClientState) -> None:
        """Load the broadcast weights, then this client's own local entries."""
        own = model.state_dict()
        merged = {k: torch.from_numpy(v) for k, v in weights.items() if k in own}
        unknown = sorted(set(weights) - set(own))
        if unknown:
            raise ProtocolError(
                f"client {self.ctx.client_id}: broadcast has entries the model lacks: "
                f"{unknown[:5]}"
            )
        for k, v in state.arrays.get(LOCAL, {}).items():
            merged[k] = torch.from_numpy(v)
        model.load_state_dict({**own, **merged})


class FedAvgServer(ServerAlgorithm):
    """Broadcast the global weights; average the replies weighted by n_i."""

    def __init__(self, params: Any, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.weights: ArrayDict = dict(ctx.initial_weights)

    def broadcast_weights(self, client: str) -> ArrayDict:
        return self.weights

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        if stage != FIT:
            raise ProtocolError(f"{type(self).__name__} has no stage {stage!r}")
        return {
            c: Payload({WEIGHTS: self.broadcast_weights(c)}, {"round": rnd})
            for c in clients
        }

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if not replies:
            raise ProtocolError(f"round {rnd}: no client replied to stage {stage!r}")
        cids = sorted(replies)  # fixed order: same sum whatever order replies arrive
        states = [replies[c].group(WEIGHTS) for c in cids]
        counts = [float(replies[c].scalars["num_examples"]) for c in cids]
        keys = [k for k in self.weights if k in states[0]]
        new = weighted_average(states, counts, keys, self.params.bn_buffers)
        self.weights = {**self.weights, **new}
        return weighted_mean_scalars(replies)

    def global_weights(self) -> ArrayDict | None:
        return self.weights

    def state(self) -> Payload:
        return Payload({WEIGHTS: self.weights})

    def load_state(self, state: Payload) -> None:
        self.weights = dict(state.group(WEIGHTS))


class FedAvgClient(WeightsClient):
    """FedAvg: cross-entropy on local data, upload all weights."""


register_algorithm(
    "fedavg",
    FedAvgClient,
    FedAvgServer,
    FedAvgParams,
    "FedAvg (McMahan et al. 2017): local CE, example-weighted averaging",
    features=True,
    wire=Wire("weights", {"fit": "weights"}, secagg="examples"),
)
