"""The algorithm interface: every federated method is a client half and a server half.

Both halves are plain PyTorch/NumPy and know nothing of the transport. A round is a
sequence of *stages* chosen by the server half (``["fit"]`` for FedAvg; FedStain adds
a ``"stats"`` stage before ``"fit"``; FedHD runs ``"distill"`` once). In each stage:

1. ``server.configure(stage, round, clients)`` returns one :class:`Payload` per
   client (a broadcast, or per-client content such as pools without the receiver's
   own entries);
2. each client's ``handle(stage, payload, state)`` returns its reply (weights,
   statistics, synthetic data...), reading and updating its :class:`ClientState`;
3. ``server.aggregate(stage, round, replies)`` updates server state (averaging,
   pooling, controllers) and returns scalars to log.

The in-process runtime calls these directly; the Flower adapters carry the same
payloads in ``Message``s. State that must survive rounds lives in
``server.state()`` and in each ``ClientState``, both checkpointed by the runtime.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedpath.config import TrainConfig
from fedpath.data.base import Split
from fedpath.models.backbones import FedModel
from fedpath.registry import Registry
from fedpath.types import ArrayDict, ClientState, Payload, Scalar

if TYPE_CHECKING:
    from fedpath.mil.models import MILModel

#: builds a MIL model: the configured one (``None``) or a registered name
MILBuilder = Callable[[str | None], "MILModel"]


class ProtocolError(RuntimeError):
    """A stage or payload that an algorithm half does not understand."""


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from a tuple of ints/strings, stable across processes and runs.

    Every random draw in a run is seeded from (run seed, round, client, purpose), so
    results never depend on the order clients run in or on where a run resumed.
    """
    ints = [
        int.from_bytes(p.encode(), "little") % (2**63) if isinstance(p, str) else int(p)
        for p in parts
    ]
    return int(np.random.SeedSequence(ints).generate_state(1, np.uint64)[0] >> 1)


@dataclass
class ClientContext:
    """Everything a client half may use: its data, model factory, training config.

    ``data`` is the client's training split, ``test`` its own test split (used by
    :meth:`ClientAlgorithm.evaluate`). On a slide-bag dataset ``build_model``
    raises and ``build_mil`` builds the configured MIL model (or a named one: FedHD
    clients may each choose their architecture); on images ``build_mil`` is None.
    """

    client_id: str
    domain: str
    data: Split
    num_classes: int
    build_model: Callable[[], FedModel]
    train: TrainConfig
    round: int
    seed: int
    device: torch.device
    on_epoch: Callable[[int, int], None] | None = None  # (epoch, total) progress
    test: Split | None = None
    build_mil: MILBuilder | None = None

    def seed_for(self, *tags: int | str) -> int:
        return derive_seed(self.seed, self.round, self.client_id, *tags)

    @cached_property
    def _class_weight(self) -> torch.Tensor | None:
        return self.class_weight()

    def class_weight(self) -> torch.Tensor | None:
        """Per-class loss weights n / (C * n_c) from this client's own training
        labels when ``train.class_weights`` is ``balanced`` (absent classes: 0)."""
        if self.train.class_weights != "balanced":
            return None
        counts = np.bincount(self.data.labels, minlength=self.num_classes)
        n = float(counts.sum())
        w = np.where(counts > 0, n / (self.num_classes * np.maximum(counts, 1)), 0.0)
        return torch.as_tensor(w, dtype=torch.float32, device=self.device)

    def cross_entropy(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The classification loss of the image algorithms (``train.class_weights``)."""
        w = self._class_weight
        return F.cross_entropy(logits, y, weight=None if w is None else w.to(logits))


@dataclass
class ServerContext:
    """What a server half starts from: the initial global weights and the run shape."""

    initial_weights: ArrayDict
    client_ids: list[str]
    client_domains: dict[str, str]
    rounds: int
    seed: int
    build_model: Callable[[], FedModel]
    build_mil: MILBuilder | None = None
    local_epochs: int = 1


class ClientAlgorithm(ABC):
    """The part of an algorithm that runs at a hospital.

    A fresh instance is created for every call, so nothing lives on ``self`` between
    rounds: what must survive goes into the :class:`ClientState`.
    """

    def __init__(self, params: Any, ctx: ClientContext) -> None:
        self.params = params
        self.ctx = ctx

    @abstractmethod
    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        """Answer one stage of a round."""

    def deployed_model(self, payload: Payload, state: ClientState) -> nn.Module:
        """The model this client would use: by default the broadcast global weights
        (group ``weights``) plus the entries it keeps local (state group ``local``,
        e.g. FedBN's norms). Personalised methods (FedHD) return their own."""
        ctx = self.ctx
        model: nn.Module = (
            ctx.build_mil(None) if ctx.build_mil is not None else ctx.build_model()
        )
        own = model.state_dict()
        if "weights" not in payload.arrays:
            raise ProtocolError(
                f"client {ctx.client_id}: no global weights to evaluate and no model "
                f"of its own ({type(self).__name__})"
            )
        merged = {**payload.arrays["weights"], **state.arrays.get("local", {})}
        model.load_state_dict(
            {**own, **{k: torch.from_numpy(v) for k, v in merged.items() if k in own}}
        )
        return model.to(ctx.device)

    def evaluate(self, payload: Payload, state: ClientState) -> dict[str, Any]:
        """Metrics of :meth:`deployed_model` on this client's test split.

        Only metrics leave the client, never predictions.
        """
        from fedpath.runtime.evaluate import split_metrics

        test = self.ctx.test
        if test is None or len(test) == 0:
            return {}
        model = self.deployed_model(payload, state)
        return split_metrics(
            model, test, self.ctx.train.eval_batch_size, self.ctx.device
        )


class ServerAlgorithm(ABC):
    """The part of an algorithm that runs at the coordinator."""

    def __init__(self, params: Any, ctx: ServerContext) -> None:
        self.params = params
        self.ctx = ctx

    def stages(self, rnd: int) -> Sequence[str]:
        """The stages of round ``rnd`` (1-based), in order."""
        return ("fit",)

    @abstractmethod
    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        """One payload per client taking part in ``stage``."""

    @abstractmethod
    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        """Fold the clients' replies into server state; return scalars to log."""

    def global_weights(self) -> ArrayDict | None:
        """The global model for evaluation on unseen domains (None: no global model)."""
        return None

    def evaluate_payload(self, client: str) -> Payload:
        """What ``client`` receives to evaluate its deployed model (default: the
        global weights, if any)."""
        weights = self.global_weights()
        return Payload({"weights": weights} if weights is not None else {})

    @abstractmethod
    def state(self) -> Payload:
        """Everything needed to resume the server half after a crash."""

    @abstractmethod
    def load_state(self, state: Payload) -> None: ...


@dataclass(frozen=True)
class AlgorithmSpec:
    """A registered algorithm: its two halves and its parameter dataclass."""

    client: type[ClientAlgorithm]
    server: type[ServerAlgorithm]
    summary: str
    #: what the clients train on: "images", or "bags" (slides as patch embeddings)
    data: str = "images"


#: Registered algorithms; ``ALGORITHMS.params(name)`` is the params dataclass.
ALGORITHMS: Registry[AlgorithmSpec] = Registry("algorithm")


def register_algorithm(
    name: str,
    client: type[ClientAlgorithm],
    server: type[ServerAlgorithm],
    params: type | None = None,
    summary: str = "",
    data: str = "images",
) -> AlgorithmSpec:
    spec = AlgorithmSpec(
        client, server, summary or (client.__doc__ or "").strip(), data
    )
    ALGORITHMS.register(name, params=params)(spec)
    return spec


def weighted_mean_scalars(
    replies: Mapping[str, Payload],
    keys: Sequence[str] | None = None,
    weight_key: str = "num_examples",
) -> dict[str, Scalar]:
    """Example-weighted mean of numeric reply scalars (train losses for the log)."""
    if not replies:
        return {}
    weights = {c: float(p.scalars.get(weight_key, 1)) for c, p in replies.items()}
    total = sum(weights.values()) or 1.0
    names = (
        keys
        if keys is not None
        else sorted(
            {
                k
                for p in replies.values()
                for k, v in p.scalars.items()
                if isinstance(v, int | float)
                and not isinstance(v, bool)
                and k != weight_key
            }
        )
    )
    out: dict[str, Scalar] = {}
    for k in names:
        vals = [
            (weights[c], float(p.scalars[k]))
            for c, p in replies.items()
            if k in p.scalars
        ]
        if vals:
            out[k] = sum(w * v for w, v in vals) / (sum(w for w, _ in vals) or total)
    return out
