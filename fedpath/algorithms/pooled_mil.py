"""Centralized pooled MIL training: the upper bound of FedHD's table.

NOT privacy-preserving, by design: in round 1 every client uploads its real
slide embeddings and the coordinator trains one model on all of them (the
setting federated learning is measured against). Each client then evaluates that
model on its own test slides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from fedpath.algorithms.base import (
    ClientAlgorithm,
    ProtocolError,
    ServerAlgorithm,
    ServerContext,
    derive_seed,
    register_algorithm,
)
from fedpath.algorithms.mil_common import (
    MILTrainParams,
    arrays_to_bags,
    bags_to_arrays,
    real_bags,
)
from fedpath.config import ConfigError
from fedpath.mil.bags import SlideBag
from fedpath.mil.train import train_mil
from fedpath.types import ArrayDict, ClientState, Payload, Scalar, as_numpy_dict

REAL = "real_slides"


class PooledMILClient(ClientAlgorithm):
    """Upload the real training slides (upper-bound baseline only)."""

    params: MILTrainParams

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        real = real_bags(self.ctx)
        if stage == "fit":  # later rounds: the coordinator trains, clients idle
            return Payload({}, {"num_examples": len(real)})
        if stage != "upload":
            raise ProtocolError(f"pooled_mil has no stage {stage!r}")
        return Payload({REAL: bags_to_arrays(real)}, {"num_examples": len(real)})


class PooledMILServer(ServerAlgorithm):
    """Train ``model.backbone`` on every client's real slides at the coordinator."""

    params: MILTrainParams

    def __init__(self, params: MILTrainParams, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        if params.models:
            raise ConfigError(
                "config key 'algorithm.params.models': pooled training has one model"
            )
        self.weights: ArrayDict = dict(ctx.initial_weights)
        self.slides: list[SlideBag] = []

    def stages(self, rnd: int) -> Sequence[str]:
        return ("upload",) if rnd == 1 else ("fit",)

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        return {c: Payload({}, {"round": rnd}) for c in clients}

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if stage == "upload":
            self.slides = [
                b
                for c in sorted(replies)
                for b in arrays_to_bags(replies[c].group(REAL), c, c)
            ]
        return self._train(rnd)

    def _train(self, rnd: int) -> dict[str, Scalar]:
        if self.ctx.build_mil is None:
            raise ConfigError("pooled_mil needs a slide-bag dataset")
        model = self.ctx.build_mil(None)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in self.weights.items()})
        hist = train_mil(
            model,
            self.slides,
            epochs=self.params.epochs or self.ctx.local_epochs,
            lr=self.params.lr,
            weight_decay=self.params.weight_decay,
            seed=derive_seed(self.ctx.seed, rnd, "pooled") % (2**31),
        )
        self.weights = as_numpy_dict(model.state_dict())
        return {"loss": hist["loss"][-1], "slides": len(self.slides)}

    def global_weights(self) -> ArrayDict:
        return self.weights

    def state(self) -> Payload:
        return Payload({"weights": self.weights, REAL: bags_to_arrays(self.slides)})

    def load_state(self, state: Payload) -> None:
        self.weights = dict(state.group("weights"))
        self.slides = arrays_to_bags(state.group(REAL), "pooled", "pooled")


register_algorithm(
    "pooled_mil",
    PooledMILClient,
    PooledMILServer,
    MILTrainParams,
    "Centralized pooled MIL training (upper bound; uploads real embeddings)",
    data="bags",
)
