"""FedProx-SSL: federated SimCLR plus FedProx's proximal term.

FedAD Section 5.6 (after Li et al. 2020): L = NT-Xent + (mu / 2) ||w - w_g||^2 over
the trainable parameters of the encoder and the projection head, w_g being the
weights received at the start of the round. Aggregation as FedAvg-SSL.
"""

from __future__ import annotations

from typing import Any

import torch

from fedpath.algorithms.base import register_algorithm
from fedpath.algorithms.fedavg_ssl import SimCLRClient, SimCLRServer
from fedpath.algorithms.ssl_common import SSLNet
from fedpath.losses import proximal_term, snapshot_parameters
from fedpath.params.algorithms import FedProxSSLParams
from fedpath.types import ClientState, Payload
from fedpath.wire import Wire


class FedProxSSLClient(SimCLRClient):
    """SimCLR + (mu/2)||w - w_g||^2 on encoder and projection head."""

    params: FedProxSSLParams

    def begin(self, net: SSLNet, payload: Payload, state: ClientState) -> None:
        self.anchored = [*net.model.encoder.parameters(), *net.shared.parameters()]
        self.anchor = snapshot_parameters(self.anchored)

    def ssl_loss(
        self, net: SSLNet, view_a: torch.Tensor, view_b: torch.Tensor, x: torch.Tensor
    ) -> dict[str, Any]:
        cl, _, _ = self.simclr(net, view_a, view_b)
        prox = proximal_term(self.anchored, self.anchor, self.params.mu, stacked=True)
        return {
            "loss": cl + prox.penalty,
            "cl": cl.detach(),
            "prox": prox.distance.detach(),
        }


class FedProxSSLServer(SimCLRServer):
    client_cls = FedProxSSLClient


register_algorithm(
    "fedprox_ssl",
    FedProxSSLClient,
    FedProxSSLServer,
    FedProxSSLParams,
    "FedProx-SSL: federated SimCLR + (mu/2)||w - w_g||^2",
    wire=Wire("weights", {"fit": "weights"}),
)
