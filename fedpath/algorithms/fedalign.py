"""FedAlign (Gupta, Sutar, Singh, Sethi; CVPRW 2025), paper intent of its released code.

What the released code does (read from its repository; docs/references.md):
FedCCRL's exchange (per-image mean/std of r = 10 % of the images, pool without the
client's own), plus

* *selective transfer*: k-means (k = 7) on the 6-d (mean, std) pool; samples are
  allotted to clusters in proportion to cluster size (at least one each) and drawn
  within a cluster with probability proportional to the variance of the entry's
  6-d statistic vector;
* chained views ``v1 = AugMix(MixStyle(x))``, ``v2 = AugMix(MixStyle(v1))``;
* ``L = CE(x) + CE(v1) + CE(v2) + lambda2 * JS + lambda1 * mean_k S(f(v_k), f(x))
  + lambda3 * mean_k MSE(f(v_k), f(x))``, all lambdas 0.1, t = 0.1.

Implemented here with the paper's intent where the released code contradicts it:
the released MixStyle overwrites the selected cross-client statistics with an
in-batch permutation, so they are computed but unused; here MixStyle draws from the
selected cross-client entries. Its domain discriminator is trained on detached
features and never affects the model (gradient reversal is commented out), so it is
omitted. ``selected_fraction`` of the pool is selected per round (the released code
selects per batch; the distribution is the same).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedpath.algorithms.base import register_algorithm
from fedpath.algorithms.fedccrl import FedCCRLClient, FedCCRLServer
from fedpath.losses import js_divergence
from fedpath.params.algorithms import FedAlignParams
from fedpath.stain import StatPool
from fedpath.wire import Wire


def selective_transfer(
    stats: np.ndarray, k: int, fraction: float, rng: np.random.Generator
) -> np.ndarray:
    """Indices of pool entries chosen by FedAlign's cluster-aware sampling.

    ``stats`` is (P, C, 2); entries are clustered on their flattened statistics,
    each cluster gets a share of ``round(fraction * P)`` proportional to its size
    (at least one), and entries within a cluster are drawn without replacement with
    probability proportional to the variance of their statistic vector.
    """
    from sklearn.cluster import KMeans  # lazy: ~1.6 s to import, rarely needed

    flat = stats.reshape(len(stats), -1).astype(np.float64)
    n_pool = len(flat)
    k = max(1, min(k, n_pool))
    labels = (
        KMeans(
            n_clusters=k, n_init=3, random_state=int(rng.integers(2**31))
        ).fit_predict(flat)
        if k > 1
        else np.zeros(n_pool, int)
    )
    total = max(1, round(fraction * n_pool))
    chosen: list[np.ndarray] = []
    for c in range(k):
        members = np.flatnonzero(labels == c)
        if len(members) == 0:
            continue
        share = min(len(members), max(1, round(total * len(members) / n_pool)))
        var = flat[members].var(axis=1) + 1e-12
        chosen.append(rng.choice(members, size=share, replace=False, p=var / var.sum()))
    return np.sort(np.concatenate(chosen))


class FedAlignClient(FedCCRLClient):
    """FedAlign client: selective transfer, chained views, contrastive + JS + MSE."""

    params: FedAlignParams

    def begin(self, model: nn.Module, payload: Any, state: Any) -> None:
        super().begin(model, payload, state)
        rng = np.random.default_rng(self.ctx.seed_for("selective-transfer"))
        stats = self.pool["mean_std"]
        keep = selective_transfer(
            stats, self.params.clusters, self.params.selected_fraction, rng
        )
        self.ms_pool = StatPool(
            torch.from_numpy(stats[keep]), space="rgb", kind="mean_std"
        )

    def views(self, x: torch.Tensor) -> list[torch.Tensor]:
        """``[x, v1, v2]`` chained: ``v1 = AugMix(MixStyle(x))``, ``v2`` of ``v1``."""
        v1 = self.augment(x)
        return [x, v1, self.augment(v1)]

    def loss(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> dict[str, Any]:
        p = self.params
        out, ce, ra = self.aligned_forward(model, x, y)
        zs = out.zs
        mse = 0.5 * (F.mse_loss(zs[1], zs[0]) + F.mse_loss(zs[2], zs[0]))
        js = js_divergence(list(out.ls))
        total = ce + p.lambda1 * ra + p.lambda2 * js + p.lambda3 * mse
        return {
            "loss": total,
            "cls": ce.detach(),
            "ra": ra.detach(),
            "js": js.detach(),
            "mse": mse.detach(),
        }


register_algorithm(
    "fedalign",
    FedAlignClient,
    FedCCRLServer,
    FedAlignParams,
    "FedAlign (Gupta et al. 2025): FedCCRL + selective transfer, chained views, "
    "feature MSE",
    wire=Wire(
        "weights and per-image channel mean/std",
        {"stats": "statistics", "fit": "weights"},
        caps={"upload_ratio": "max_upload_ratio", "stats_noise": "min_stats_noise"},
    ),
)
