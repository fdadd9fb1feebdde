"""Shared pieces of the slide-bag (MIL) algorithms: bags on the wire, local training.

Slides travel as one array group: ``features`` (sum of N_i, D) float32 with the
bags stacked, ``sizes`` (S,) int64 patches per bag and ``labels`` (S,) int64. A
client's own MIL model lives in its :class:`ClientState` (group ``model``) with
the architecture's name in the scalars, so heterogeneous clients need nothing
from the server to rebuild it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from fedpath.algorithms.base import ClientAlgorithm, ClientContext, ProtocolError
from fedpath.config import ConfigError
from fedpath.data.bags import BagStore, split_bags
from fedpath.mil.bags import SlideBag
from fedpath.mil.models import MILModel, build_mil_model
from fedpath.mil.train import train_mil
from fedpath.types import ArrayDict, ClientState, Payload, as_numpy_dict

MODEL = "model"


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


def real_bags(ctx: ClientContext) -> list[SlideBag]:
    """The client's real training slides (a clear error on an image dataset)."""
    if ctx.build_mil is None or not isinstance(ctx.data.store, BagStore):
        raise ConfigError(
            f"client {ctx.client_id}: this algorithm trains MIL models on slide "
            "bags, but the dataset holds images (data.name: synthetic_bags, "
            "clam_bags...)"
        )
    bags = split_bags(ctx.data)
    if not bags:
        raise ConfigError(f"client {ctx.client_id} has no training slides")
    return bags


def embedding_space(ctx: ClientContext) -> tuple[str, int]:
    """(declared extractor space, dimension) of the client's bags."""
    store = ctx.data.store
    assert isinstance(store, BagStore)
    return store.embedding_space, store.dim


@dataclass(frozen=True)
class MILTrainParams:
    """Local MIL training (CLAM's defaults: Adam, lr 2e-4, weight decay 1e-5).

    ``epochs``: local epochs per round (``null``: ``train.local_epochs``);
    ``models``: architecture per client or domain (a key is a client id such as
    ``hospital_0/c0`` or a domain), default ``model.backbone`` with
    ``model.params``; ``model_params``: parameters per architecture name for the
    ones chosen in ``models`` (e.g. ``{transmil: {hidden: 64}}``).
    """

    epochs: int | None = None
    lr: float = 2e-4
    weight_decay: float = 1e-5
    models: dict[str, str] = field(default_factory=dict)
    model_params: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unused = sorted(set(self.model_params) - set(self.models.values()))
        if unused:
            raise ConfigError(
                f"config key 'algorithm.params.model_params': {unused} are not "
                f"architectures chosen in algorithm.params.models "
                f"({sorted(set(self.models.values()))})"
            )
        if self.epochs is not None and self.epochs < 1:
            raise ConfigError(
                f"config key 'algorithm.params.epochs': expected an integer >= 1 or "
                f"null, got {self.epochs}"
            )


def architecture(ctx: ClientContext, models: Mapping[str, str]) -> str | None:
    """The client's chosen architecture (None: the configured ``model.backbone``)."""
    return models.get(ctx.client_id, models.get(ctx.domain))


def own_model(ctx: ClientContext, state: ClientState, p: MILTrainParams) -> MILModel:
    """The client's MIL model: from its state if trained before, else fresh."""
    assert ctx.build_mil is not None
    name = str(state.scalars.get("architecture", "")) or architecture(ctx, p.models)
    torch.manual_seed(ctx.seed_for("init"))
    if name is not None and name in p.model_params:
        _, dim = embedding_space(ctx)
        model = build_mil_model(name, dim, ctx.num_classes, p.model_params[name])
    else:
        model = ctx.build_mil(name)
    if MODEL in state.arrays:
        model.load_state_dict(
            {k: torch.from_numpy(v) for k, v in state.arrays[MODEL].items()}
        )
    return model.to(ctx.device)


def keep_model(state: ClientState, model: MILModel, name: str) -> None:
    state.arrays[MODEL] = as_numpy_dict(model.state_dict())
    state.scalars["architecture"] = name


def train_bags(
    ctx: ClientContext,
    model: MILModel,
    real: Sequence[SlideBag],
    synthetic: Sequence[SlideBag] = (),
    *,
    epochs: int,
    lr: float,
    weight_decay: float,
    t0: int = 0,
    curriculum: bool = False,
    loss_synthetic: Literal["gce", "ce"] = "gce",
    q: float = 0.7,
    penalty: Callable[[], Tensor] | None = None,
) -> dict[str, Any]:
    """Train locally with progress; return the last epoch's scalars."""

    def progress(epoch: int, _: dict[str, float]) -> None:
        if ctx.on_epoch is not None:
            ctx.on_epoch(epoch + 1, epochs)

    hist = train_mil(
        model,
        real,
        synthetic,
        epochs=epochs,
        t0=t0,
        lr=lr,
        weight_decay=weight_decay,
        loss_synthetic=loss_synthetic,
        q=q,
        curriculum=curriculum,
        seed=ctx.seed_for("mil"),
        on_epoch=progress,
        penalty=penalty,
    )
    return {k: float(v[-1]) for k, v in hist.items() if not np.isnan(v[-1])}


class OwnMILClient(ClientAlgorithm):
    """A client that keeps and deploys its own MIL model (FedHD, local training)."""

    params: MILTrainParams

    def deployed_model(self, payload: Payload, state: ClientState) -> nn.Module:
        if MODEL not in state.arrays:
            raise ProtocolError(f"client {self.ctx.client_id} has not trained yet")
        return own_model(self.ctx, state, self.params)
