"""Heads on top of the global extractor h = f(x) for self-supervised training.

* :class:`ProjectionHead`: SimCLR's Linear-ReLU-Linear projection (FedAvg-SSL,
  FedProx-SSL, MOON, ELCFS; aggregated with the backbone there).
* :class:`DisentanglingHead`: FedAD's local head g_k (Section 4.2.2), one
  Linear-ReLU-Linear MLP from h in R^F to R^(d_s + d_d), split into the semantic
  projection z_s and the domain projection z_d (d_s = d_d = 128). It never leaves
  the client.
* :func:`teacher_projection`: FedAD's auxiliary p_g (Section 4.3.2) mapping the
  frozen teacher's features h_g in R^F to z_g in R^128. The paper does not say
  whether p_g is trained; every FedAD loss term detaches z_g, so nothing could
  train it. Here it is a fixed random linear map drawn from the run seed: the same
  at every client and round, never trained and never transmitted (each client
  regenerates it), so all clients align their z_s to one common teacher space.
"""

from __future__ import annotations

import torch
from torch import nn


class ProjectionHead(nn.Module):
    """Linear(F, hidden) -> ReLU -> Linear(hidden, out_dim)."""

    def __init__(self, in_dim: int, out_dim: int = 128, hidden: int | None = None):
        super().__init__()
        hid = hidden or in_dim
        self.net = nn.Sequential(
            nn.Linear(in_dim, hid), nn.ReLU(inplace=True), nn.Linear(hid, out_dim)
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.net(h)


class DisentanglingHead(nn.Module):
    """FedAD g_k: h -> (z_s, z_d) through one Linear-ReLU-Linear MLP (Sec. 4.2.2)."""

    def __init__(
        self,
        in_dim: int,
        semantic_dim: int = 128,
        domain_dim: int = 128,
        hidden: int | None = None,
    ) -> None:
        super().__init__()
        self.semantic_dim = semantic_dim
        self.mlp = ProjectionHead(in_dim, semantic_dim + domain_dim, hidden)

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.mlp(h)
        return out[:, : self.semantic_dim], out[:, self.semantic_dim :]


def teacher_projection(in_dim: int, out_dim: int, seed: int) -> nn.Linear:
    """FedAD p_g: a fixed (untrained) random linear map R^F -> R^out_dim.

    Entries ~ N(0, 1/F), no bias; drawn from ``seed`` on a private generator, so
    every client with the same run seed builds the identical map.
    """
    g = torch.Generator().manual_seed(int(seed))
    layer = nn.Linear(in_dim, out_dim, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(out_dim, in_dim, generator=g) / in_dim**0.5)
    layer.weight.requires_grad_(False)
    return layer
