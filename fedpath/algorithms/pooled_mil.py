"""Centralized pooled MIL training: the upper bound of FedHD's table.

NOT privacy-preserving, by design: in round 1 every client uploads its real
slide embeddings and the coordinator trains one model on all of them (the
setting federated learning is measured against). Each client then evaluates that
model on its own test slides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from fedpath.algorithms.base import (
    ClientAlgorithm,
    ProtocolError,
    ServerAlgorithm,
    ServerContext,
    derive_seed,
    register_algorithm,
    round_only,
)
from fedpath.algorithms.mil_common import (
    MILTrainParams,
    arrays_to_bags,
    bag_loss,
    bags_to_arrays,
    real_bags,
)
from fedpath.algorithms.names import FIT, REAL_SLIDES, UPLOAD, WEIGHTS
from fedpath.config import ConfigError
from fedpath.losses import weighted_cross_entropy
from fedpath.mil.bags import SlideBag
from fedpath.types import ArrayDict, ClientState, Payload, Scalar, as_numpy_dict
from fedpath.wire import Wire


class PooledMILClient(ClientAlgorithm[MILTrainParams]):
    """Upload the real training slides (upper-bound baseline only)."""

    params: MILTrainParams

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        real = real_bags(self.ctx)
        if stage == FIT:  # later rounds: the coordinator trains, clients idle
            return Payload({}, {"num_examples": len(real)})
        if stage != UPLOAD:
            raise ProtocolError(f"pooled_mil has no stage {stage!r}")
        return Payload({REAL_SLIDES: bags_to_arrays(real)}, {"num_examples": len(real)})


class PooledMILServer(ServerAlgorithm[MILTrainParams]):
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
        return (UPLOAD,) if rnd == 1 else (FIT,)

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        return round_only(clients, rnd)

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if stage == UPLOAD:
            self.slides = [
                b
                for c in sorted(replies)
                for b in arrays_to_bags(replies[c].group(REAL_SLIDES), c, c)
            ]
        return self._train(rnd)

    def _train(self, rnd: int) -> dict[str, Scalar]:
        task = self.ctx.task.bags()
        model = task.build_model()
        model.load_state_dict({k: torch.from_numpy(v) for k, v in self.weights.items()})
        # train.class_weights over the pooled slides' labels
        weight = task.class_weight(np.array([b.label for b in self.slides]))
        scalars = task.fit(
            model,
            self.slides,
            bag_loss(lambda logits, y: weighted_cross_entropy(logits, y, weight)),
            seed=derive_seed(self.ctx.seed, rnd, "pooled") % (2**31),
            round_idx=rnd,
        )
        self.weights = as_numpy_dict(model.state_dict())
        return {"loss": scalars["loss"], "slides": len(self.slides)}

    def global_weights(self) -> ArrayDict:
        return self.weights

    def state(self) -> Payload:
        return Payload(
            {WEIGHTS: self.weights, REAL_SLIDES: bags_to_arrays(self.slides)}
        )

    def load_state(self, state: Payload) -> None:
        self.weights = dict(state.group(WEIGHTS))
        self.slides = arrays_to_bags(state.group(REAL_SLIDES), "pooled", "pooled")


register_algorithm(
    "pooled_mil",
    PooledMILClient,
    PooledMILServer,
    MILTrainParams,
    "Centralized pooled MIL training (upper bound; uploads real embeddings)",
    data="bags",
    wire=Wire(
        "every real slide's patch embeddings and label",
        {"upload": "raw data", "fit": "metrics"},
    ),
)
