"""FedAvg and FedProx on a homogeneous MIL model (FedHD's parameter-sharing baselines).

Every client trains the configured ``model.backbone`` (one architecture for all:
averaging needs it) on its real slides for ``epochs`` per round; the server
averages the weights by slide count. FedProx adds (mu/2)||w - w_global||^2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fedpath.algorithms.base import ClientAlgorithm, ProtocolError, register_algorithm
from fedpath.algorithms.fedavg import WEIGHTS, FedAvgServer
from fedpath.algorithms.mil_common import MILTrainParams, real_bags, train_bags
from fedpath.config import ConfigError
from fedpath.types import ClientState, Payload, as_numpy_dict


@dataclass(frozen=True)
class FedAvgMILParams(MILTrainParams):
    """``mu``: FedProx's proximal weight (0: FedAvg)."""

    mu: float = 0.0
    bn_buffers: Literal["average", "pooled"] = "average"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.models:
            raise ConfigError(
                "config key 'algorithm.params.models': weight averaging needs one "
                "architecture for every client (set model.backbone instead)"
            )
        if self.mu < 0:
            raise ConfigError(
                f"config key 'algorithm.params.mu': expected a number >= 0, got "
                f"{self.mu}"
            )


class FedAvgMILClient(ClientAlgorithm):
    """Load the global MIL weights, train on real slides, upload the weights."""

    params: FedAvgMILParams

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage != "fit":
            raise ProtocolError(f"{type(self).__name__} has no stage {stage!r}")
        p, ctx = self.params, self.ctx
        real = real_bags(ctx)
        model = self.deployed_model(payload, state)
        anchor = [q.detach().clone() for q in model.parameters()]

        def proximal() -> torch.Tensor:
            return (
                0.5
                * p.mu
                * sum(  # type: ignore[return-value]
                    ((q - a) ** 2).sum()
                    for q, a in zip(model.parameters(), anchor, strict=True)
                )
            )

        scalars = train_bags(
            ctx,
            model,  # type: ignore[arg-type]
            real,
            epochs=p.epochs or ctx.train.local_epochs,
            lr=p.lr,
            weight_decay=p.weight_decay,
            penalty=proximal if p.mu > 0 else None,
        )
        return Payload(
            {WEIGHTS: as_numpy_dict(model.state_dict())},
            {"num_examples": len(real), **scalars},
        )


register_algorithm(
    "fedavg_mil",
    FedAvgMILClient,
    FedAvgServer,
    FedAvgMILParams,
    "FedAvg/FedProx (mu > 0) on one MIL architecture; real slides stay local",
    data="bags",
)


@dataclass(frozen=True)
class FedProxMILParams(FedAvgMILParams):
    """FedProx's default proximal weight."""

    mu: float = 0.01


register_algorithm(
    "fedprox_mil",
    FedAvgMILClient,
    FedAvgServer,
    FedProxMILParams,
    "FedProx on one MIL architecture: CE + (mu/2)||w - w_global||^2",
    data="bags",
)
