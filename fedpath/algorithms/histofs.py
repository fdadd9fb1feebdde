r"""HistoFS: pseudo bag styles shared, AdaIN augmentation, authenticity weight.

The FedHD paper's HistoFS baseline (Raswa, Lu, Wang, CVPR 2025; partial code:
``lalakitchen/HistoFS``, ``tools/pseudo_bag_style_generation.py``,
``proposed_module/*``).

- **Pseudo bag styles** (stage ``stats``, round 1): the style of a patch
  embedding :math:`h \in \mathbb R^D` is :math:`(\mu, \sigma)`, its mean and
  standard deviation over the feature dimension; the patch styles of a bag are
  clustered by k-means into ``num_styles`` (K = 5) centres under the 2-Wasserstein
  distance of 1-D Gaussians, :math:`W_2 = \sqrt{(\mu_1-\mu_2)^2 +
  (\sigma_1-\sigma_2)^2}` (so each centre, the W2 barycentre of its cluster, is
  the mean :math:`(\mu, \sigma)`). A client uploads only these ``(K, 2)`` styles
  per bag; the server pools them and sends each client the **other** clients'
  styles (its own when it is alone).
- **Augmentation**: a bag is restyled by AdaIN of every patch embedding with one
  random received style :math:`(\mu_k, \sigma_k)`:
  :math:`\tilde h = (h - \mu(h)) / (\sigma(h) + 10^{-5})\,\sigma_k + \mu_k`.
- **Authenticity**: with the attentions :math:`A` and :math:`\tilde A` of the
  original and restyled bag, :math:`a = 1 - \lambda \cos(A, \tilde A)`
  (:math:`\lambda` = ``authenticity`` = 0.4); the aligned attention is
  :math:`a \tilde A`.
- **Aggregation**: the MIL weights are averaged by slide count (FedAvg), so all
  clients train one architecture (``models`` is refused).

How :math:`\tilde A` enters the loss, the aggregation rule and the training
hyper-parameters are **not released** (the README: "training scripts will be
added"). This implementation's choice, an approximation:

.. math:: \mathcal L = \mathcal L_{MIL}(h, y) + w_{aug}\,\mathrm{CE}(f(\tilde h), y)
          + w_{cons}\; \mathrm{sg}(a)\,\big(1 - \cos(\mathrm{sg}(A), \tilde A)\big)

(``aug_weight`` = ``consistency_weight`` = 1; ``sg``: stop-gradient; the
cosine over patches, averaged over attention branches): the restyled bag must
be classified correctly and attend where the original does, more strongly the
less its attention resembles the original's (larger :math:`a`). The aligned
attention :math:`a\tilde A` is reported, not used to re-pool (a fedpath MIL model
pools inside its forward, TransMIL without an attention pooling at all).
Standard deviations are population ones (divide by D) for the styles and for
AdaIN alike, so restyling a patch with its own style is the identity up to the
1e-5. A bag with fewer than K patches gets as many styles as patches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fedpath.algorithms.base import (
    ClientAlgorithm,
    ProtocolError,
    ServerContext,
    register_algorithm,
    round_only,
    weighted_mean_scalars,
)
from fedpath.algorithms.fedavg import FedAvgServer
from fedpath.algorithms.mil_common import real_bags
from fedpath.algorithms.names import FIT, POOL, STATS, WEIGHTS
from fedpath.mil.models import MILModel
from fedpath.params.mil_baselines import HistoFSParams
from fedpath.types import ArrayDict, ClientState, Payload, Scalar, as_numpy_dict

#: a client's pseudo bag styles (stats reply): ``styles`` (n, 2) = (mu, sigma)
STYLES = "styles"
#: client state: the styles received from the other clients
RECEIVED_STYLES = "received_styles"

EPS = 1e-5


def patch_styles(features: Tensor) -> Tensor:
    """``(N, 2)``: mean and (population) std over the feature dimension."""
    f = features.float()
    return torch.stack([f.mean(1), f.std(1, unbiased=False)], dim=1)


def w2_kmeans(
    styles: Tensor, k: int, iters: int = 50, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """k-means of 1-D Gaussians ``(mu, sigma)`` under W2 (Euclidean in the
    ``(mu, sigma)`` plane, whose barycentre is the mean). k-means++ seeding from
    ``seed``; at most ``iters`` Lloyd steps; an empty cluster keeps its centre.
    Returns the ``(min(k, N), 2)`` centres and the ``(N,)`` assignment."""
    x = styles.double()
    n = len(x)
    k = min(k, n)
    gen = torch.Generator().manual_seed(seed)
    first = int(torch.randint(n, (1,), generator=gen))
    centres = [x[first]]
    for _ in range(1, k):
        d2 = torch.cdist(x, torch.stack(centres)).min(1).values ** 2
        if float(d2.sum()) <= 0:  # all points already on a centre
            idx = int(torch.randint(n, (1,), generator=gen))
        else:
            idx = int(torch.multinomial(d2 / d2.sum(), 1, generator=gen))
        centres.append(x[idx])
    c = torch.stack(centres)
    assign = torch.cdist(x, c).argmin(1)
    for _ in range(iters):
        for j in range(k):
            members = x[assign == j]
            if len(members):
                c[j] = members.mean(0)
        new = torch.cdist(x, c).argmin(1)
        if torch.equal(new, assign):
            break
        assign = new
    return c.float(), assign


def pseudo_bag_styles(features: Tensor, k: int, iters: int, seed: int) -> Tensor:
    """The ``(min(k, N), 2)`` pseudo styles of one bag."""
    return w2_kmeans(patch_styles(features), k, iters, seed)[0]


def adain(features: Tensor, style: Tensor) -> Tensor:
    """Restyle every patch embedding (row) to ``style = (mu, sigma)``."""
    mu = features.mean(1, keepdim=True)
    sd = features.std(1, unbiased=False, keepdim=True)
    return (features - mu) / (sd + EPS) * style[1] + style[0]


def authenticity(a_orig: Tensor, a_aug: Tensor, lam: float = 0.4) -> Tensor:
    """``a = 1 - lam cos(A_orig, A_aug)``: cosine over patches, mean over the
    ``(K, N)`` attention's branches."""
    cos = F.cosine_similarity(a_orig, a_aug, dim=-1).mean()
    return 1.0 - lam * cos


class HistoFSClient(ClientAlgorithm[HistoFSParams]):
    """Upload pseudo styles once; train the global model with restyled bags."""

    def deployed_model(self, payload: Payload, state: ClientState) -> MILModel:
        model = super().deployed_model(payload, state)
        assert isinstance(model, MILModel)
        return model

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage == STATS:
            return self.styles()
        if stage != FIT:
            raise ProtocolError(f"histofs has no stage {stage!r}")
        return self.fit(payload, state)

    def styles(self) -> Payload:
        p, ctx = self.params, self.ctx
        real = real_bags(ctx)
        seed = ctx.seed_for("styles") % (2**31)
        styles = [
            pseudo_bag_styles(b.features, p.num_styles, p.kmeans_iters, seed + i)
            for i, b in enumerate(real)
        ]
        arr = torch.cat(styles).numpy().astype(np.float32)
        return Payload({STYLES: {"styles": arr}}, {"num_examples": len(real)})

    def fit(self, payload: Payload, state: ClientState) -> Payload:
        p, ctx = self.params, self.ctx
        if POOL in payload.arrays:
            state.arrays[RECEIVED_STYLES] = payload.arrays[POOL]
        pool = state.arrays.get(RECEIVED_STYLES, {}).get("styles")
        real = real_bags(ctx)
        model = self.deployed_model(payload, state)
        styles = torch.as_tensor(pool) if pool is not None and len(pool) else None
        gen = torch.Generator().manual_seed(ctx.seed_for("histofs") % (2**63))

        def loss(
            m: MILModel, features: Tensor, label: Tensor, synthetic: bool
        ) -> dict[str, Tensor]:
            out = m(features, label)
            mil = ctx.cross_entropy(out.logits, label) + out.aux_loss
            terms: dict[str, Tensor] = {"loss_real": mil.detach()}
            use = styles is not None and float(torch.rand(1, generator=gen)) < p.aug_p
            if not use or styles is None:
                return {"loss": mil, **terms}
            k = int(torch.randint(len(styles), (1,), generator=gen))
            aug = m(adain(features, styles[k].to(features)), label)
            ce_aug = ctx.cross_entropy(aug.logits, label)
            a_orig = out.attention.detach()
            a = authenticity(a_orig, aug.attention, p.authenticity).detach()
            cons = 1.0 - F.cosine_similarity(a_orig, aug.attention, dim=-1).mean()
            total = mil + p.aug_weight * ce_aug + p.consistency_weight * a * cons
            terms.update(loss_aug=ce_aug.detach(), authenticity=a, consistency=cons)
            return {"loss": total, **terms}

        scalars: dict[str, Any] = ctx.task.bags().fit(
            model,
            real,
            loss,
            seed=ctx.seed_for("mil"),
            round_idx=ctx.round,
            on_epoch=ctx.on_epoch,
        )
        return Payload(
            {WEIGHTS: as_numpy_dict(model.state_dict())},
            {"num_examples": len(real), **scalars},
        )


class HistoFSServer(FedAvgServer):
    """FedAvg of the MIL weights plus the pool of pseudo styles."""

    params: HistoFSParams

    def __init__(self, params: HistoFSParams, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.styles: dict[str, np.ndarray] = {}

    def stages(self, rnd: int) -> Sequence[str]:
        return (STATS, FIT) if rnd == 1 else (FIT,)

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        if stage == STATS:
            return round_only(clients, rnd)
        out = super().configure(stage, rnd, clients)
        if rnd == 1:  # clients keep the styles for later rounds
            for c in clients:
                out[c].arrays[POOL] = {"styles": self.others(c)}
        return out

    def others(self, client: str) -> np.ndarray:
        """The other clients' styles (the client's own when it is alone)."""
        parts = [self.styles[c] for c in sorted(self.styles) if c != client]
        if not parts:
            parts = [self.styles[c] for c in sorted(self.styles)]
        return np.concatenate(parts) if parts else np.zeros((0, 2), np.float32)

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if stage == STATS:
            self.styles = {c: r.group(STYLES)["styles"] for c, r in replies.items()}
            out = weighted_mean_scalars(replies)
            out["styles"] = sum(len(s) for s in self.styles.values())
            return out
        return super().aggregate(stage, rnd, replies)

    def state(self) -> Payload:
        saved = super().state()
        ids = self.ctx.client_ids
        owners = [c for c in ids if c in self.styles]
        if owners:
            styles: ArrayDict = {
                "styles": np.concatenate([self.styles[c] for c in owners]),
                "owner": np.concatenate(
                    [np.full(len(self.styles[c]), ids.index(c)) for c in owners]
                ).astype(np.int64),
            }
            saved.arrays[STYLES] = styles
        return saved

    def load_state(self, state: Payload) -> None:
        super().load_state(state)
        self.styles = {}
        group = state.arrays.get(STYLES)
        if group is not None:
            for i in dict.fromkeys(group["owner"].tolist()):
                self.styles[self.ctx.client_ids[i]] = group["styles"][
                    group["owner"] == i
                ]


register_algorithm(
    "histofs",
    HistoFSClient,
    HistoFSServer,
    HistoFSParams,
    "HistoFS: pseudo bag styles (W2 k-means) shared, AdaIN restyling, FedAvg",
    data="bags",
)
