"""FedAvg-SSL: federated SimCLR, backbone and projection head both aggregated.

The FedAD paper's baseline (Section 5.6, after McMahan et al. 2017 and Chen et al.
2020): every client minimises NT-Xent over two SimCLR views of its unlabeled
images, z = p(h(x)) with p a Linear-ReLU-Linear projection head to 128; the server
averages the encoder and the projection head (n_k-weighted). The paper's ablation
identifies it with FedAD at gamma = 0 and lambda = 0 but with an aggregated head.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from fedpath.algorithms.base import register_algorithm
from fedpath.algorithms.ssl_common import SSLClient, SSLNet, SSLServer
from fedpath.losses import nt_xent
from fedpath.params.algorithms import FedAvgSSLParams
from fedpath.ssl.heads import ProjectionHead
from fedpath.wire import Wire


class SimCLRClient(SSLClient):
    """SimCLR on two views; the projection head is aggregated (``shared``)."""

    @classmethod
    def build_shared(cls, params: Any, feature_dim: int) -> dict[str, nn.Module]:
        return {"proj": ProjectionHead(feature_dim, params.proj_dim)}

    def project(
        self, net: SSLNet, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(h, z) for a batch of images."""
        h = net.encode(x)
        return h, net.shared["proj"](h)

    def simclr(
        self, net: SSLNet, view_a: torch.Tensor, view_b: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(NT-Xent, h of both views, z of both views) in one forward pass."""
        n, both = self.joint(view_a, view_b)
        h, z = self.project(net, both)
        return nt_xent(z[:n], z[n:], self.params.temperature), h, z

    def ssl_loss(
        self, net: SSLNet, view_a: torch.Tensor, view_b: torch.Tensor, x: torch.Tensor
    ) -> dict[str, Any]:
        cl, _, _ = self.simclr(net, view_a, view_b)
        return {"loss": cl, "cl": cl.detach()}


class SimCLRServer(SSLServer):
    """FedAvg over encoder + projection head."""

    client_cls: ClassVar[type[SSLClient]] = SimCLRClient


register_algorithm(
    "fedavg_ssl",
    SimCLRClient,
    SimCLRServer,
    FedAvgSSLParams,
    "FedAvg-SSL: federated SimCLR, backbone + projection head aggregated",
    wire=Wire("weights", {"fit": "weights"}),
)
