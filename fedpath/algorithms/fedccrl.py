"""FedCCRL (Wang, Guo, Tang 2024, arXiv 2410.11267), as its released code does it.

Facts from the released code (read from its repository; docs/references.md):

* every round each client uploads the per-image channel mean and std of
  ``int(r * n)`` training images (r = 0.1; here ceil, so a client always uploads)
  and receives the other clients' pooled statistics with the weights;
* two views per batch, ``v_k = AugMix(MixStyle(x))``: pixel-level MixStyle with
  p = 1 and lambda ~ Beta(0.1, 0.1) per sample mixing the image's own (mean, std)
  with a uniformly drawn pool entry, then torchvision's AugMix (all ops, defaults;
  ops shared by the batch, mixing weights per sample) on the uint8 image;
* ``L = CE(x) + CE(v1) + CE(v2) + lambda2 * JS(x, v1, v2)
  + lambda1 * mean_k S(f(v_k), f(x))`` with the repository's own supervised
  contrastive variant S (positives include the anchor itself), t = 0.1,
  lambda1 = lambda2 = 0.1; FedAvg over all state_dict entries.

Differences, on purpose: statistics are computed on the [0, 1] image rather than
the ImageNet-normalized tensor (the same style up to a fixed affine map) with the
population std; MixStyle output is clamped to [0, 1] before the uint8 cast (the
released code casts out-of-range values unsafely); a fresh optimizer each round
(the released client objects carry Adam moments across rounds).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fedpath.algorithms.base import register_algorithm
from fedpath.algorithms.stats_exchange import StatsExchangeClient, StatsExchangeServer
from fedpath.algorithms.views import ViewOutputs, forward_views
from fedpath.losses import fedccrl_contrastive, js_divergence
from fedpath.params.algorithms import FedCCRLParams
from fedpath.stain import StatPool, augmix, image_statistics, mixstyle
from fedpath.types import ArrayDict
from fedpath.wire import Wire


class FedCCRLClient(StatsExchangeClient):
    """FedCCRL client: cross-client MixStyle + AugMix views, CE + contrastive + JS."""

    params: FedCCRLParams

    def compute_stats(self, images: torch.Tensor) -> ArrayDict:
        return {"mean_std": image_statistics(images, "mean_std").float().numpy()}

    def begin(self, model: nn.Module, payload: Any, state: Any) -> None:
        super().begin(model, payload, state)
        stats = torch.from_numpy(self.pool["mean_std"])
        self.ms_pool = StatPool(stats, space="rgb", kind="mean_std")
        from torchvision.transforms import v2  # lazy: importing torchvision costs ~2 s

        self._augmix = v2.AugMix()

    def augment(self, x: torch.Tensor) -> torch.Tensor:
        """AugMix(MixStyle(x)) for a batch in [0, 1]."""
        g = self.generator
        styled = mixstyle(x, self.ms_pool, g, alpha=self.params.mixstyle_alpha)
        if self.params.augmix == "geometric":
            return augmix(styled, g)
        as_uint8 = styled.clamp(0, 1).mul(255).round().to(torch.uint8)
        return self._augmix(as_uint8).float().div_(255.0)

    def views(self, x: torch.Tensor) -> list[torch.Tensor]:
        """``[x, v1, v2]``: two independent views ``AugMix(MixStyle(x))``."""
        return [x, self.augment(x), self.augment(x)]

    def aligned_forward(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[ViewOutputs, torch.Tensor, torch.Tensor]:
        """The three versions through the network, ``CE(x) + CE(v1) + CE(v2)``
        and the representation alignment ``mean_k S(f(v_k), f(x))``.

        Shared with FedAlign, which chains its views and adds a feature MSE.
        """
        with torch.no_grad():
            views = self.views(x)
        out = forward_views(model, views)
        zs, t = out.zs, self.params.temperature
        # summed, as released; train.class_weights applies as for every method
        ce = torch.as_tensor(sum(self.ctx.cross_entropy(lv, y) for lv in out.ls))
        ra = 0.5 * (
            fedccrl_contrastive(zs[0], zs[1], y, t)
            + fedccrl_contrastive(zs[0], zs[2], y, t)
        )
        return out, ce, ra

    def loss(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> dict[str, Any]:
        p = self.params
        out, ce, ra = self.aligned_forward(model, x, y)
        js = js_divergence(list(out.ls))
        total = ce + p.lambda1 * ra + p.lambda2 * js
        return {"loss": total, "cls": ce.detach(), "ra": ra.detach(), "js": js.detach()}


class FedCCRLServer(StatsExchangeServer):
    """FedAvg plus per-client pools of the other clients' (mean, std)."""


register_algorithm(
    "fedccrl",
    FedCCRLClient,
    FedCCRLServer,
    FedCCRLParams,
    "FedCCRL (Wang et al. 2024): mean/std exchange, MixStyle + AugMix, CE + "
    "contrastive + JS",
    wire=Wire(
        "weights and per-image channel mean/std",
        {"stats": "statistics", "fit": "weights"},
        caps={"upload_ratio": "max_upload_ratio", "stats_noise": "min_stats_noise"},
    ),
)
