"""FedProx-SSL: federated SimCLR plus FedProx's proximal term.

FedAD Section 5.6 (after Li et al. 2020): L = NT-Xent + (mu / 2) ||w - w_g||^2 over
the trainable parameters of the encoder and the projection head, w_g being the
weights received at the start of the round. Aggregation as FedAvg-SSL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedpath.algorithms.base import register_algorithm
from fedpath.algorithms.fedavg_ssl import FedAvgSSLParams, SimCLRClient, SimCLRServer
from fedpath.algorithms.ssl_common import SSLNet
from fedpath.config import ConfigError
from fedpath.types import ClientState, Payload


@dataclass(frozen=True)
class FedProxSSLParams(FedAvgSSLParams):
    """mu: weight of the proximal term (FedProx grid 0.001-1)."""

    mu: float = 0.01

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mu < 0:
            raise ConfigError(
                "config key 'algorithm.params.mu': expected a number >= 0, "
                f"got {self.mu}"
            )


class FedProxSSLClient(SimCLRClient):
    """SimCLR + (mu/2)||w - w_g||^2 on encoder and projection head."""

    params: FedProxSSLParams

    def begin(self, net: SSLNet, payload: Payload, state: ClientState) -> None:
        self.anchored = [*net.model.encoder.parameters(), *net.shared.parameters()]
        self.anchor = [p.detach().clone() for p in self.anchored]

    def ssl_loss(
        self, net: SSLNet, view_a: torch.Tensor, view_b: torch.Tensor, x: torch.Tensor
    ) -> dict[str, Any]:
        cl, _, _ = self.simclr(net, view_a, view_b)
        prox = torch.stack(
            [
                ((p - a) ** 2).sum()
                for p, a in zip(self.anchored, self.anchor, strict=True)
            ]
        ).sum()
        return {
            "loss": cl + 0.5 * self.params.mu * prox,
            "cl": cl.detach(),
            "prox": prox.detach(),
        }


class FedProxSSLServer(SimCLRServer):
    client_cls = FedProxSSLClient


register_algorithm(
    "fedprox_ssl",
    FedProxSSLClient,
    FedProxSSLServer,
    FedProxSSLParams,
    "FedProx-SSL: federated SimCLR + (mu/2)||w - w_g||^2",
)
