"""FedDis (Bercea et al. 2021), adapted to self-supervised classification pre-training.

FedDis disentangles a global, domain-invariant "shape" representation (aggregated)
from a local "appearance" representation (kept at each client), and ties them
together by reconstructing the image from both, with a latent-consistency term
on the shape code of an image and an intensity-augmented version of it. Its
published form is a brain-MRI autoencoder for anomaly segmentation; the FedAD
paper uses it as a classification baseline without saying how. Here:

* invariant part (aggregated): the encoder h and an invariant projection head
  z_inv = p_inv(h) trained with NT-Xent between the two SimCLR views (the
  latent-consistency term, over views that differ in colour/appearance);
* specific part (local, never sent): an appearance head z_spec = p_spec(h) and
  a linear decoder that reconstructs the view at ``recon_size`` x
  ``recon_size`` pixels (average pooled) from [z_inv, z_spec];
* L = NT-Xent(z_inv^a, z_inv^b) + ``recon_weight`` * mean_v MSE(dec(.), view_v).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedpath.algorithms.base import register_algorithm
from fedpath.algorithms.ssl_common import SSLClient, SSLNet, SSLServer
from fedpath.losses import nt_xent
from fedpath.params.algorithms import FedDisParams
from fedpath.ssl.heads import ProjectionHead
from fedpath.wire import Wire


class FedDisClient(SSLClient):
    """Shared invariant head + local appearance head and decoder."""

    params: FedDisParams

    @classmethod
    def build_shared(cls, params: Any, feature_dim: int) -> dict[str, nn.Module]:
        return {"inv": ProjectionHead(feature_dim, params.proj_dim)}

    @classmethod
    def build_local(cls, params: Any, feature_dim: int) -> dict[str, nn.Module]:
        d, r = params.proj_dim, params.recon_size
        return {
            "spec": ProjectionHead(feature_dim, d),
            "dec": nn.Linear(2 * d, 3 * r * r),
        }

    def ssl_loss(
        self, net: SSLNet, view_a: torch.Tensor, view_b: torch.Tensor, x: torch.Tensor
    ) -> dict[str, Any]:
        p = self.params
        n, both = self.joint(view_a, view_b)
        h = net.encode(both)
        z_inv, z_spec = net.shared["inv"](h), net.local["spec"](h)
        cl = nt_xent(z_inv[:n], z_inv[n:], p.temperature)
        r = p.recon_size
        recon = net.local["dec"](torch.cat([z_inv, z_spec], dim=1)).view(-1, 3, r, r)
        target = F.adaptive_avg_pool2d(both, r)
        rec = F.mse_loss(recon, target)
        return {
            "loss": cl + p.recon_weight * rec,
            "cl": cl.detach(),
            "recon": rec.detach(),
        }


class FedDisServer(SSLServer):
    client_cls = FedDisClient


register_algorithm(
    "feddis",
    FedDisClient,
    FedDisServer,
    FedDisParams,
    "FedDis (adapted): shared invariant part, local appearance part + reconstruction",
    wire=Wire("weights of the invariant part", {"fit": "weights"}),
)
