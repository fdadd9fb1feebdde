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

**Clients of different feature extractors and architectures** (``spaces:
adapt``, fedpath's reading: the FedHD paper runs HistoFS on [extractor + MIL]
pairs but does not say how weights are averaged across them; docs/
fedhd_heterogeneous.md). Weights can only be averaged between clients with the
same architecture in the same embedding space, so the server averages (FedAvg,
by slide count) within each such **group**
(:mod:`~fedpath.algorithms.group_average`) and sends each client its group's
average (a client alone in its group trains its own model; each group starts
from one seeded initialisation). A style is a point :math:`(\mu, \sigma)` of its
extractor's scale, so a receiver maps the styles of a foreign space ``s`` into
its own by matching the two style distributions' first two moments per
coordinate, :math:`\tilde x = (x - m_s) / d_s \cdot d_t + m_t` (:func:`map_styles`;
:math:`m, d` the mean and std over styles, those of ``s`` from the received
styles of that space, those of its own space from its own styles; sigma kept
>= 1e-5). Nothing new crosses the network but each client's space name.
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
    derive_seed,
    register_algorithm,
    round_only,
    weighted_mean_scalars,
)
from fedpath.algorithms.fedavg import FedAvgServer
from fedpath.algorithms.group_average import GroupAverages, group_of
from fedpath.algorithms.mil_common import (
    architecture,
    arrays_to_spaced,
    embedding_space,
    keep_model,
    own_model,
    real_bags,
)
from fedpath.algorithms.mil_spaces import SPACE_PREFIX, check_spaces, keep_spaced
from fedpath.algorithms.names import FIT, MODEL, POOL, STATS, WEIGHTS
from fedpath.mil.models import MILModel
from fedpath.mil.styles import (
    adain,
    authenticity,
    map_styles,
    pseudo_bag_styles,
    style_moments,
)
from fedpath.params.mil_baselines import HistoFSParams
from fedpath.types import ArrayDict, ClientState, Payload, Scalar, as_numpy_dict
from fedpath.wire import Wire

#: a client's pseudo bag styles (stats reply): ``styles`` (n, 2) = (mu, sigma)
STYLES = "styles"
#: client state: the styles received from the other clients
RECEIVED_STYLES = "received_styles"
#: client state (``spaces: adapt``): the client's own styles
OWN_STYLES = "own_styles"


class HistoFSClient(ClientAlgorithm[HistoFSParams]):
    """Upload pseudo styles once; train the global (or group) model with
    restyled bags."""

    def group(self) -> str:
        space, _ = embedding_space(self.ctx)
        return group_of(architecture(self.ctx, self.params.models) or "", space)

    def deployed_model(self, payload: Payload, state: ClientState) -> MILModel:
        if not self.params.adapt:
            model = super().deployed_model(payload, state)
            assert isinstance(model, MILModel)
            return model
        if MODEL not in state.arrays:
            raise ProtocolError(f"client {self.ctx.client_id} has not trained yet")
        return self.group_model(payload, state)

    def group_model(self, payload: Payload, state: ClientState) -> MILModel:
        """``spaces: adapt``: the client's architecture in its space, from its
        group's average if one arrived, else its own last model, else the
        group's seeded initialisation."""
        ctx = self.ctx
        seed = None  # one initialisation per group
        if MODEL not in state.arrays:
            seed = derive_seed(ctx.seed, "histofs-group", self.group()) % (2**63)
        model = own_model(ctx, state, self.params, init_seed=seed)
        if WEIGHTS in payload.arrays:
            model.load_state_dict(
                {k: torch.from_numpy(v) for k, v in payload.arrays[WEIGHTS].items()}
            )
        return model

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage == STATS:
            return self.styles(state)
        if stage != FIT:
            raise ProtocolError(f"histofs has no stage {stage!r}")
        return self.fit(payload, state)

    def styles(self, state: ClientState) -> Payload:
        p, ctx = self.params, self.ctx
        real = real_bags(ctx)
        seed = ctx.seed_for("styles") % (2**31)
        styles = [
            pseudo_bag_styles(b.features, p.num_styles, p.kmeans_iters, seed + i)
            for i, b in enumerate(real)
        ]
        arr = torch.cat(styles).numpy().astype(np.float32)
        scalars: dict[str, Scalar] = {"num_examples": len(real)}
        if self.params.adapt:
            space, dim = embedding_space(ctx)
            scalars.update(embedding_space=space, dim=dim)
            state.arrays[OWN_STYLES] = {"styles": arr}
        return Payload({STYLES: {"styles": arr}}, scalars)

    def received_styles(self, state: ClientState) -> Tensor | None:
        """The styles to restyle with, in this client's space (None: none)."""
        group = state.arrays.get(RECEIVED_STYLES, {})
        if "styles" in group:  # one space
            pool = group["styles"]
            return torch.as_tensor(pool) if len(pool) else None
        own, _ = embedding_space(self.ctx)
        mine = style_moments(torch.as_tensor(state.arrays[OWN_STYLES]["styles"]))
        parts = []
        for space, part in arrays_to_spaced(group, state.scalars):
            x = torch.as_tensor(part["styles"])
            parts.append(x if space == own else map_styles(x, style_moments(x), mine))
        return torch.cat(parts) if parts else None

    def fit(self, payload: Payload, state: ClientState) -> Payload:
        p, ctx = self.params, self.ctx
        keep_spaced(payload, state, POOL, into=RECEIVED_STYLES)
        real = real_bags(ctx)
        if self.params.adapt:
            model = self.group_model(payload, state)
        else:
            model = self.deployed_model(payload, state)
        styles = self.received_styles(state)
        gen = torch.Generator().manual_seed(ctx.seed_for("histofs") % (2**63))

        def loss(
            m: MILModel, features: Tensor, label: Tensor, synthetic: bool
        ) -> dict[str, Tensor]:
            out = m(features, label)
            mil = ctx.bag_cross_entropy(out.logits, label) + out.aux_loss
            terms: dict[str, Tensor] = {"loss_real": mil.detach()}
            use = styles is not None and float(torch.rand(1, generator=gen)) < p.aug_p
            if not use or styles is None:
                return {"loss": mil, **terms}
            k = int(torch.randint(len(styles), (1,), generator=gen))
            aug = m(adain(features, styles[k].to(features)), label)
            ce_aug = ctx.bag_cross_entropy(aug.logits, label)
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
        if self.params.adapt:
            keep_model(state, model, architecture(ctx, p.models) or "")
            scalars["group"] = self.group()
        return Payload(
            {WEIGHTS: as_numpy_dict(model.state_dict())},
            {"num_examples": len(real), **scalars},
        )


class HistoFSServer(FedAvgServer):
    """FedAvg of the MIL weights (per group with ``spaces: adapt``) plus the pool
    of pseudo styles."""

    params: HistoFSParams

    def __init__(self, params: HistoFSParams, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.styles: dict[str, np.ndarray] = {}
        #: ``spaces: adapt``: each client's space; each group's average
        self.spaces: dict[str, str] = {}
        self.groups = GroupAverages()

    def stages(self, rnd: int) -> Sequence[str]:
        return (STATS, FIT) if rnd == 1 else (FIT,)

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        if stage == STATS:
            return round_only(clients, rnd)
        if not self.params.adapt:
            out = super().configure(stage, rnd, clients)
            if rnd == 1:  # clients keep the styles for later rounds
                for c in clients:
                    out[c].arrays[POOL] = {"styles": self.others(c)}
            return out
        if stage != FIT:
            raise ProtocolError(f"histofs has no stage {stage!r}")
        out = {}
        for c in clients:
            out[c] = self.evaluate_payload(c)
            out[c].scalars["round"] = rnd
            if rnd == 1:
                arrays, names = self.others_by_space(c)
                out[c].arrays[POOL] = arrays
                out[c].scalars.update(names)
        return out

    def evaluate_payload(self, client: str) -> Payload:
        if not self.params.adapt:
            return super().evaluate_payload(client)
        return self.groups.payload(client)

    def global_weights(self) -> ArrayDict | None:
        return None if self.params.adapt else self.weights

    def _senders(self, client: str) -> list[str]:
        """The clients whose styles ``client`` receives: the others (itself when
        it is alone)."""
        return [c for c in sorted(self.styles) if c != client] or sorted(self.styles)

    def others(self, client: str) -> np.ndarray:
        """The other clients' styles (the client's own when it is alone)."""
        parts = [self.styles[c] for c in self._senders(client)]
        return np.concatenate(parts) if parts else np.zeros((0, 2), np.float32)

    def others_by_space(self, client: str) -> tuple[ArrayDict, dict[str, Scalar]]:
        """The others' styles, one array ``styles/<i>`` per embedding space with
        its name in ``space/<i>``."""
        senders = self._senders(client)
        arrays: ArrayDict = {}
        names: dict[str, Scalar] = {}
        for i, space in enumerate(sorted({self.spaces[c] for c in senders})):
            mine = [self.styles[c] for c in senders if self.spaces[c] == space]
            arrays[f"styles/{i}"] = np.concatenate(mine)
            names[f"{SPACE_PREFIX}{i}"] = space
        return arrays, names

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if stage == STATS:
            self.styles = {c: r.group(STYLES)["styles"] for c, r in replies.items()}
            if self.params.adapt:
                why = "their styles would be mixed across feature extractors"
                self.spaces = check_spaces(replies, "HistoFS", why, adapt=True)
            out = weighted_mean_scalars(replies)
            out["styles"] = sum(len(s) for s in self.styles.values())
            return out
        if not self.params.adapt:
            return super().aggregate(stage, rnd, replies)
        if not replies:
            raise ProtocolError(f"round {rnd}: no client replied to stage {stage!r}")
        self.groups.average(replies, self.params.bn_buffers)
        scalars = weighted_mean_scalars(replies)  # numeric: not the group names
        return {**scalars, "groups": len(self.groups.groups)}

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
        for c in self.spaces:
            saved.scalars[f"space_of/{ids.index(c)}"] = self.spaces[c]
        self.groups.save(saved, ids)
        return saved

    def load_state(self, state: Payload) -> None:
        super().load_state(state)
        ids = self.ctx.client_ids
        self.styles = {}
        group = state.arrays.get(STYLES)
        if group is not None:
            for i in dict.fromkeys(group["owner"].tolist()):
                self.styles[ids[i]] = group["styles"][group["owner"] == i]
        self.spaces = {
            ids[int(k.split("/")[1])]: str(v)
            for k, v in state.scalars.items()
            if k.startswith("space_of/")
        }
        self.groups.load(state, ids)


__all__ = ["HistoFSClient", "HistoFSServer"]

register_algorithm(
    "histofs",
    HistoFSClient,
    HistoFSServer,
    HistoFSParams,
    "HistoFS: pseudo bag styles (W2 k-means) shared, AdaIN restyling, FedAvg",
    data="bags",
    wire=Wire(
        "MIL model weights and per-bag pseudo styles (K feature mean/std)",
        {"stats": "statistics", "fit": "weights"},
    ),
)
