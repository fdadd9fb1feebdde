"""FedProx (Li et al., MLSys 2020): FedAvg plus a proximal term on the local loss.

L = CE + (mu / 2) * ||w - w_global||^2 over the trainable parameters, with w_global
the weights received at the start of the round. The server is FedAvg's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fedpath.algorithms.base import register_algorithm
from fedpath.algorithms.fedavg import FedAvgServer, WeightsClient
from fedpath.losses import proximal_term, snapshot_parameters
from fedpath.params.algorithms import FedProxParams
from fedpath.types import ClientState, Payload
from fedpath.wire import Wire


class FedProxClient(WeightsClient):
    """FedProx: CE + (mu/2)||w - w_global||^2."""

    def begin(self, model: nn.Module, payload: Payload, state: ClientState) -> None:
        self.anchor = snapshot_parameters(model.parameters())

    def loss(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> dict[str, Any]:
        out = super().loss(model, x, y)
        prox = proximal_term(model.parameters(), self.anchor, self.params.mu)
        return {
            "loss": out["loss"] + prox.penalty,
            "ce": out["loss"].detach(),
            "prox": prox.distance.detach(),
        }


register_algorithm(
    "fedprox",
    FedProxClient,
    FedAvgServer,
    FedProxParams,
    "FedProx (Li et al. 2020): CE + (mu/2)||w - w_global||^2",
    features=True,
    wire=Wire("weights", {"fit": "weights"}, secagg="examples"),
)
