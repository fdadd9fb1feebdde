"""Shared pieces of the slide-bag (MIL) algorithms: bags on the wire, local training.

Slides travel as one array group: ``features`` (sum of N_i, D) float32 with the
bags stacked, ``sizes`` (S,) int64 patches per bag and ``labels`` (S,) int64. A
client's own MIL model lives in its :class:`ClientState` (group ``model``) with
the architecture's name in the scalars, so heterogeneous clients need nothing
from the server to rebuild it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from fedpath.algorithms.base import (
    ClientAlgorithm,
    ClientContext,
    ProtocolError,
)
from fedpath.algorithms.names import DISTILL, FIT, MODEL, SYNTHETIC
from fedpath.config import ConfigError
from fedpath.mil.bags import SlideBag
from fedpath.mil.models import MILModel, build_mil_model
from fedpath.params.mil_train import MILTrainParams
from fedpath.tasks.bags import BagLoss
from fedpath.types import ArrayDict, ClientState, Payload, Scalar, as_numpy_dict


def bags_to_arrays(bags: Sequence[SlideBag]) -> ArrayDict:
    """Stack slides into the wire format (see the module docstring)."""
    if not bags:
        return {
            "features": np.zeros((0, 0), np.float32),
            "sizes": np.zeros(0, np.int64),
            "labels": np.zeros(0, np.int64),
        }
    return {
        "features": torch.cat([b.features for b in bags]).float().numpy(),
        "sizes": np.array([b.num_patches for b in bags], dtype=np.int64),
        "labels": np.array([b.label for b in bags], dtype=np.int64),
    }


def arrays_to_bags(arrays: ArrayDict, domain: str, prefix: str) -> list[SlideBag]:
    """Unstack slides received in the wire format; ids ``<prefix>-<i>``."""
    sizes = np.asarray(arrays["sizes"], dtype=np.int64)
    feats = torch.from_numpy(np.ascontiguousarray(arrays["features"]))
    if int(sizes.sum()) != feats.shape[0]:
        raise ProtocolError(
            f"bags from {prefix!r}: sizes sum to {int(sizes.sum())} but "
            f"{feats.shape[0]} feature rows arrived"
        )
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return [
        SlideBag(f"{prefix}-{i}", feats[bounds[i] : bounds[i + 1]], int(y), domain)
        for i, y in enumerate(np.asarray(arrays["labels"]))
    ]


#: the scalar that names part ``i``'s space in a spaced group: ``space/<i>``
SPACE_PREFIX = "space/"


def spaced_to_arrays(
    parts: Sequence[tuple[str, ArrayDict]],
) -> tuple[ArrayDict, dict[str, Scalar]]:
    """Slides of several embedding spaces as one group: part ``i``'s wire arrays
    under ``features/<i>``, ``sizes/<i>``, ``labels/<i>`` (plus any other of its
    arrays, e.g. ``owner/<i>``), its space's name in the scalar ``space/<i>``.
    Empty parts are left out."""
    arrays: ArrayDict = {}
    scalars: dict[str, Scalar] = {}
    for space, part in parts:
        if len(part["sizes"]) == 0:
            continue
        i = len(scalars)
        scalars[f"{SPACE_PREFIX}{i}"] = space
        arrays.update({f"{k}/{i}": v for k, v in part.items()})
    return arrays, scalars


def arrays_to_spaced(
    arrays: ArrayDict, scalars: Mapping[str, Scalar]
) -> list[tuple[str, ArrayDict]]:
    """The parts of :func:`spaced_to_arrays`, in order."""
    out = []
    i = 0
    while f"{SPACE_PREFIX}{i}" in scalars:
        suffix = f"/{i}"
        part = {
            k.removesuffix(suffix): v for k, v in arrays.items() if k.endswith(suffix)
        }
        out.append((str(scalars[f"{SPACE_PREFIX}{i}"]), part))
        i += 1
    return out


def real_bags(ctx: ClientContext) -> list[SlideBag]:
    """The client's real training slides, in its own embedding space (a clear
    error on an image dataset)."""
    bags = ctx.task.bags().client_slides(ctx.data, ctx.client_id, ctx.domain)
    if not bags:
        raise ConfigError(f"client {ctx.client_id} has no training slides")
    return bags


def embedding_space(ctx: ClientContext) -> tuple[str, int]:
    """(declared extractor space, dimension) of the client's bags: its own
    feature set (``algorithm.params.features``) or the dataset's."""
    return ctx.task.bags().client_space(ctx.client_id, ctx.domain)


def architecture(ctx: ClientContext, models: Mapping[str, str]) -> str | None:
    """The client's chosen architecture (None: the configured ``model.backbone``)."""
    return models.get(ctx.client_id, models.get(ctx.domain))


def own_model(
    ctx: ClientContext,
    state: ClientState,
    p: MILTrainParams,
    init_seed: int | None = None,
) -> MILModel:
    """The client's MIL model: from its state if trained before, else fresh
    (initialised from ``init_seed``, default the client's own seed)."""
    task = ctx.task.bags()
    name = str(state.scalars.get("architecture", "")) or architecture(ctx, p.models)
    space, dim = task.client_space(ctx.client_id, ctx.domain)
    torch.manual_seed(ctx.seed_for("init") if init_seed is None else init_seed)
    if name is not None and name in p.model_params:
        model = build_mil_model(name, dim, ctx.num_classes, p.model_params[name])
        if space != task.embedding_space:
            model.embedding_space = space
    else:
        model = task.build_model(name, space)
    if MODEL in state.arrays:
        model.load_state_dict(
            {k: torch.from_numpy(v) for k, v in state.arrays[MODEL].items()}
        )
    return model.to(ctx.device)


def keep_model(state: ClientState, model: MILModel, name: str) -> None:
    state.arrays[MODEL] = as_numpy_dict(model.state_dict())
    state.scalars["architecture"] = name


#: ``penalty() -> tensor`` added to every bag's loss (FedProx's proximal term)
Penalty = Callable[[], Tensor]


def bag_loss(
    cross_entropy: Callable[[Tensor, Tensor], Tensor],
    synthetic_loss: Callable[[Tensor, Tensor], Tensor] | None = None,
    penalty: Penalty | None = None,
) -> BagLoss:
    """The MIL algorithms' loss: ``cross_entropy`` + the model's auxiliary loss on
    real slides, ``synthetic_loss`` on the slide logits of synthetic ones (their
    instances are not real patches), plus ``penalty`` on every bag."""

    def loss(
        model: MILModel, features: Tensor, label: Tensor, synthetic: bool
    ) -> dict[str, Tensor]:
        out = model(features, label)
        terms: dict[str, Tensor]
        if synthetic:
            assert synthetic_loss is not None
            value = synthetic_loss(out.logits, label)
            terms = {"loss_synthetic": value.detach()}
        else:
            value = cross_entropy(out.logits, label) + out.aux_loss
            terms = {"loss_real": value.detach(), "aux": out.aux_loss.detach()}
        if penalty is not None:
            pen = penalty()
            terms["penalty"] = pen.detach()
            value = value + pen
        return {"loss": value, **terms}

    return loss


def train_bags(
    ctx: ClientContext,
    model: MILModel,
    real: Sequence[SlideBag],
    synthetic: Sequence[SlideBag] = (),
    *,
    synthetic_from: int = 0,
    synthetic_loss: Callable[[Tensor, Tensor], Tensor] | None = None,
    penalty: Penalty | None = None,
) -> dict[str, Any]:
    """Train locally with the slide-bag task's loop; the last epoch's scalars."""
    return ctx.task.bags().fit(
        model,
        real,
        bag_loss(ctx.bag_cross_entropy, synthetic_loss, penalty),
        synthetic=synthetic,
        synthetic_from=synthetic_from,
        seed=ctx.seed_for("mil"),
        round_idx=ctx.round,
        on_epoch=ctx.on_epoch,
    )


class OwnMILClient(ClientAlgorithm[MILTrainParams]):
    """A client that keeps and deploys its own MIL model (FedHD, local training)."""

    params: MILTrainParams

    def deployed_model(self, payload: Payload, state: ClientState) -> nn.Module:
        if MODEL not in state.arrays:
            raise ProtocolError(f"client {self.ctx.client_id} has not trained yet")
        return own_model(self.ctx, state, self.params)


class DistillFitClient(OwnMILClient):
    """An own-model client of a one-shot synthetic-data method (FedHD, DESA,
    FedDGM-approx): stage ``distill`` makes what it shares (round 1), ``fit``
    trains its model. ``method`` names the algorithm in a protocol error."""

    method = "this algorithm"

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage == DISTILL:
            return self.distill()
        if stage == FIT:
            return self.fit(payload, state)
        raise ProtocolError(f"{self.method} has no stage {stage!r}")

    def distill(self) -> Payload:
        raise NotImplementedError

    def fit(self, payload: Payload, state: ClientState) -> Payload:
        raise NotImplementedError

    def synthetic_reply(
        self,
        synthetic: Sequence[SlideBag],
        report: Mapping[str, Scalar],
        withheld: int = 0,
    ) -> Payload:
        """The ``distill`` reply: the synthetic slides (group ``synthetic``), the
        client's declared embedding space and dimension, how many slides it made
        and withheld, and the token guard's report
        (:func:`fedpath.mil.privacy.guard_tokens`)."""
        space, dim = embedding_space(self.ctx)
        return Payload(
            {SYNTHETIC: bags_to_arrays(synthetic)},
            {
                "embedding_space": space,
                "dim": dim,
                "num_slides": len(synthetic),
                "slides_withheld": withheld,
                **report,
            },
        )


def declared_spaces(replies: Mapping[str, Payload]) -> dict[str, tuple[str, int]]:
    """Each ``distill`` reply's (embedding space, dimension)."""
    return {
        c: (str(r.scalars["embedding_space"]), int(r.scalars["dim"]))
        for c, r in replies.items()
    }


def spaces_listing(spaces: Mapping[str, tuple[str, int]]) -> str:
    return ", ".join(f"{c}: {s} (D={d})" for c, (s, d) in spaces.items())


#: the token guard's per-client figures a server logs (``<key>/<client>``)
GUARD_KEYS = ("nn_ratio_min", "nn_ratio_median", "slides_withheld")


def guard_scalars(replies: Mapping[str, Payload]) -> dict[str, Scalar]:
    """How close each client's synthetic tokens came to its real patches."""
    out: dict[str, Scalar] = {}
    for c, r in sorted(replies.items()):
        for key in GUARD_KEYS:
            if key in r.scalars:
                out[f"{key}/{c}"] = r.scalars[key]
    return out


#: the arrays of the wire format of slides
BAG_KEYS = ("features", "sizes", "labels")


def concat_bags(parts: Sequence[ArrayDict]) -> ArrayDict:
    """Several clients' slides (wire format) as one stack; empty parts skipped."""
    parts = [part for part in parts if len(part["sizes"])]
    if not parts:
        return bags_to_arrays([])
    return {k: np.concatenate([part[k] for part in parts]) for k in BAG_KEYS}


def stack_pool(
    pool: Mapping[str, ArrayDict], owners: Sequence[str], ids: Sequence[str]
) -> ArrayDict:
    """The pooled slides of ``owners`` (in that order) as one group for a server
    checkpoint, ``owner`` (per slide) the client's position in ``ids``: no
    client id inside a key."""
    stacked = {k: np.concatenate([pool[c][k] for c in owners]) for k in BAG_KEYS}
    stacked["owner"] = np.concatenate(
        [np.full(len(pool[c]["sizes"]), ids.index(c), np.int64) for c in owners]
    )
    return stacked


def unstack_pool(group: ArrayDict, ids: Sequence[str]) -> dict[str, ArrayDict]:
    """The inverse of :func:`stack_pool`, in the saved client order."""
    owner, sizes = group["owner"], group["sizes"]
    out: dict[str, ArrayDict] = {}
    row = 0
    for i in dict.fromkeys(owner.tolist()):
        mine = owner == i
        n = int(sizes[mine].sum())
        out[ids[i]] = {
            "features": group["features"][row : row + n],
            "sizes": sizes[mine],
            "labels": group["labels"][mine],
        }
        row += n
    return out
