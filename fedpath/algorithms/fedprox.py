"""FedProx (Li et al., MLSys 2020): FedAvg plus a proximal term on the local loss.

L = CE + (mu / 2) * ||w - w_global||^2 over the trainable parameters, with w_global
the weights received at the start of the round. The server is FedAvg's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from fedpath.algorithms.base import register_algorithm
from fedpath.algorithms.fedavg import FedAvgServer, WeightsClient
from fedpath.config import ConfigError
from fedpath.types import ClientState, Payload


@dataclass(frozen=True)
class FedProxParams:
    """mu: weight of the proximal term (FedProx paper grid: 0.001-1)."""

    mu: float = 0.01
    bn_buffers: Literal["average", "pooled"] = "average"

    def __post_init__(self) -> None:
        if self.mu < 0:
            raise ConfigError(
                "config key 'algorithm.params.mu': expected a number >= 0, "
                f"got {self.mu}"
            )


class FedProxClient(WeightsClient):
    """FedProx: CE + (mu/2)||w - w_global||^2."""

    def begin(self, model: nn.Module, payload: Payload, state: ClientState) -> None:
        self.anchor = [p.detach().clone() for p in model.parameters()]

    def loss(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> dict[str, Any]:
        out = super().loss(model, x, y)
        prox = sum(
            ((p - a) ** 2).sum()
            for p, a in zip(model.parameters(), self.anchor, strict=True)
        )
        prox_t = torch.as_tensor(prox)
        return {
            "loss": out["loss"] + 0.5 * self.params.mu * prox_t,
            "ce": out["loss"].detach(),
            "prox": prox_t.detach(),
        }


register_algorithm(
    "fedprox",
    FedProxClient,
    FedAvgServer,
    FedProxParams,
    "FedProx (Li et al. 2020): CE + (mu/2)||w - w_global||^2",
)
