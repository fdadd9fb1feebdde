"""STRAP-approx: style-transfer augmentation with medically irrelevant styles.

STRAP (Yamashita et al., IEEE TMI 2021) trains on a copy of the data stylized by
AdaIN with a pretrained VGG-19 encoder/decoder and artworks as style images. Those
weights cannot be downloaded here, so this is an approximation, named as such, that
keeps STRAP's idea (randomize style with styles unrelated to pathology, keep shape)
without pretrained networks (docs/references.md):

1. colour style: Reinhard transfer in CIE LAB (AdaIN on the image itself, the
   pixel-space analogue of STRAP's relu4_1 AdaIN) to a random *non-medical* style:
   per-channel LAB mean and std drawn from broad ranges that cover paintings and
   photographs (L mean 20-85, L std 8-30, a/b means +-45, a/b std 4-30), not from
   H&E;
2. texture style: RandConv (Xu et al., ICLR 2021), a random k x k convolution
   (k in {1, 3, 5, 7}, Gaussian weights) mixed with the image, re-standardized to
   the image's channel statistics, which changes local texture but not layout.

Applied online to every training image with probability ``p`` (STRAP's released
pipeline trains on the stylized copy only: p = 1). No statistics are exchanged;
aggregation is FedAvg. This is a genuine style-randomization baseline, not STRAP.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedpath.algorithms.base import register_algorithm
from fedpath.algorithms.fedavg import FedAvgServer, WeightsClient
from fedpath.params.algorithms import StrapParams
from fedpath.stain import from_space, to_space
from fedpath.types import ClientState, Payload
from fedpath.wire import Wire

_STYLE_LOW = torch.tensor([[20.0, 8.0], [-45.0, 4.0], [-45.0, 4.0]])
_STYLE_HIGH = torch.tensor([[85.0, 30.0], [45.0, 30.0], [45.0, 30.0]])


def random_styles(n: int, generator: torch.Generator) -> torch.Tensor:
    """(n, 3, 2) random non-medical LAB (mean, std) styles."""
    u = torch.rand((n, 3, 2), generator=generator)
    return _STYLE_LOW + u * (_STYLE_HIGH - _STYLE_LOW)


def reinhard(x: torch.Tensor, styles: torch.Tensor) -> torch.Tensor:
    """Colour transfer of RGB images x to LAB (mean, std) ``styles``."""
    lab = to_space(x, "lab")
    mean = lab.mean(dim=(2, 3), keepdim=True)
    std = lab.std(dim=(2, 3), keepdim=True).clamp_min(1e-3)
    out = (lab - mean) / std * styles[..., 1, None, None] + styles[..., 0, None, None]
    return from_space(out, "lab")


def rand_conv(x: torch.Tensor, generator: torch.Generator, mix: str) -> torch.Tensor:
    """RandConv texture randomization, one random filter per image (grouped conv)."""
    b, c, h, w = x.shape
    k = [1, 3, 5, 7][int(torch.randint(4, (1,), generator=generator))]
    weight = torch.randn((b * c, c, k, k), generator=generator) / (c * k * k) ** 0.5
    y = F.conv2d(x.reshape(1, b * c, h, w), weight, padding=k // 2, groups=b)
    y = y.reshape(b, c, h, w)
    # keep each image's channel statistics: only texture and colour mixing change
    y = (y - y.mean((2, 3), keepdim=True)) / y.std((2, 3), keepdim=True).clamp_min(1e-6)
    y = y * x.std((2, 3), keepdim=True) + x.mean((2, 3), keepdim=True)
    a = (
        torch.rand((b, 1, 1, 1), generator=generator)
        if mix == "random"
        else torch.ones((b, 1, 1, 1))
    )
    return (a * y + (1 - a) * x).clamp(0, 1)


class StrapClient(WeightsClient):
    """STRAP-approx: train on images restyled with random non-medical styles."""

    params: StrapParams

    def begin(self, model: nn.Module, payload: Payload, state: ClientState) -> None:
        self.generator = torch.Generator().manual_seed(self.ctx.seed_for("strap"))

    def stylize(self, x: torch.Tensor) -> torch.Tensor:
        g, p = self.generator, self.params
        out = reinhard(x, random_styles(x.shape[0], g))
        if p.texture:
            out = rand_conv(out, g, p.texture_mix)
        keep = torch.rand((x.shape[0], 1, 1, 1), generator=g) >= p.p
        return torch.where(keep, x, out)

    def loss(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> dict[str, Any]:
        with torch.no_grad():
            xs = self.stylize(x)
        return {"loss": self.ctx.cross_entropy(model(xs), y)}


register_algorithm(
    "strap",
    StrapClient,
    FedAvgServer,
    StrapParams,
    "STRAP-approx: random non-medical colour styles (LAB Reinhard) + RandConv "
    "texture, FedAvg",
    wire=Wire("weights", {"fit": "weights"}, secagg="examples"),
)
