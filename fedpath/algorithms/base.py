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

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedpath.algorithms.names import LOCAL, WEIGHTS
from fedpath.config import TrainConfig
from fedpath.data.base import Split
from fedpath.errors import ConfigError, FedpathError
from fedpath.losses import soft_targets, weighted_cross_entropy
from fedpath.params.algorithms import AlgorithmParams  # noqa: F401  (its old home)
from fedpath.registry import ALGORITHMS
from fedpath.tasks.base import Task
from fedpath.tasks.images import LossFn as ImageLoss
from fedpath.types import ArrayDict, ClientState, Payload, Scalar
from fedpath.wire import Wire, WireError

#: an algorithm's parameters dataclass (``algorithm.params``, resolved at load)
P = TypeVar("P")


class ProtocolError(FedpathError, RuntimeError):
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
    """Everything a client half may use: its data, the run's task, its round.

    ``data`` is the client's training split, ``test`` its own test split (used by
    :meth:`ClientAlgorithm.evaluate`). ``task`` builds models, runs the local loop
    and evaluates (:mod:`fedpath.tasks`); an image algorithm reaches its loop as
    ``ctx.task.images()``, a MIL algorithm as ``ctx.task.bags()``. Built by
    :func:`fedpath.runtime.context.client_context` for both runtimes.
    """

    client_id: str
    domain: str
    data: Split
    task: Task
    round: int
    seed: int
    test: Split | None = None
    on_epoch: Callable[[int, int], None] | None = None  # (epoch, total) progress

    @property
    def train(self) -> TrainConfig:
        return self.task.train

    @property
    def num_classes(self) -> int:
        return self.task.num_classes

    @property
    def device(self) -> torch.device:
        return self.task.device

    def build_model(self, name: str | None = None) -> nn.Module:
        """The configured model (or the registered one ``name``), on no device."""
        return self.task.build_model(name)

    def seed_for(self, *tags: int | str) -> int:
        return derive_seed(self.seed, self.round, self.client_id, *tags)

    def fit_images(
        self, model: nn.Module, loss: ImageLoss, data: Split | None = None
    ) -> dict[str, float]:
        """This round's local training of an image model on the client's data (or
        ``data``): the image task's loop, seeded by (run, round, client)."""
        torch.manual_seed(self.seed_for("torch"))
        return self.task.images().fit(
            model,
            self.data if data is None else data,
            loss,
            round_idx=self.round,
            seed=self.seed_for("shuffle"),
            on_epoch=self.on_epoch,
        )

    @cached_property
    def _class_weight(self) -> torch.Tensor | None:
        return self.class_weight()

    def class_weight(self) -> torch.Tensor | None:
        """Per-class loss weights n / (C * n_c) from this client's own training
        labels when ``train.class_weights`` is ``balanced`` (absent classes: 0)."""
        return self.task.class_weight(self.data.labels)

    def cross_entropy(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The classification loss of every supervised method
        (``train.class_weights``); against the batch's soft labels with
        ``train.soft_labels`` (:mod:`fedpath.losses.soft_targets`)."""
        w = self._class_weight
        soft = soft_targets.current()
        if soft is not None:
            if soft.shape != logits.shape:
                raise ConfigError(
                    f"config key 'train.soft_labels': this method classifies "
                    f"{logits.shape[0]} inputs per batch of {soft.shape[0]} samples; "
                    "soft labels apply to methods that classify each sample once "
                    "(e.g. fedavg, fedprox, fedbn): set train.soft_labels: none"
                )
            return soft_targets.soft_cross_entropy(logits, soft.to(logits), w)
        return F.cross_entropy(logits, y, weight=None if w is None else w.to(logits))

    def bag_cross_entropy(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The slide-level loss of the MIL methods (one bag per step): each bag's
        cross-entropy times its class's weight (``train.class_weights``), which
        PyTorch's weighted mean would divide out again for a batch of one."""
        return weighted_cross_entropy(logits, y, self._class_weight)


@dataclass
class ServerContext:
    """What a server half starts from: the initial global weights and the run shape."""

    initial_weights: ArrayDict
    client_ids: list[str]
    client_domains: dict[str, str]
    seed: int
    task: Task

    @property
    def rounds(self) -> int:
        return self.task.train.rounds

    @property
    def local_epochs(self) -> int:
        return self.task.train.local_epochs

    def build_model(self, name: str | None = None) -> nn.Module:
        return self.task.build_model(name)


class ClientAlgorithm(ABC, Generic[P]):
    """The part of an algorithm that runs at a hospital.

    A fresh instance is created for every call, so nothing lives on ``self`` between
    rounds: what must survive goes into the :class:`ClientState`.
    """

    def __init__(self, params: P, ctx: ClientContext) -> None:
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
        model = ctx.build_model()
        own = model.state_dict()
        if WEIGHTS not in payload.arrays:
            raise ProtocolError(
                f"client {ctx.client_id}: no global weights to evaluate and no model "
                f"of its own ({type(self).__name__})"
            )
        merged = {**payload.arrays[WEIGHTS], **state.arrays.get(LOCAL, {})}
        model.load_state_dict(
            {**own, **{k: torch.from_numpy(v) for k, v in merged.items() if k in own}}
        )
        return model.to(ctx.device)

    def evaluate(self, payload: Payload, state: ClientState) -> dict[str, Any]:
        """Metrics of :meth:`deployed_model` on this client's test split.

        Only metrics leave the client, never predictions.
        """
        test = self.ctx.test
        if test is None or len(test) == 0:
            return {}
        return self.ctx.task.evaluate(self.deployed_model(payload, state), test)


class ServerAlgorithm(ABC, Generic[P]):
    """The part of an algorithm that runs at the coordinator."""

    def __init__(self, params: P, ctx: ServerContext) -> None:
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
        return Payload({WEIGHTS: weights} if weights is not None else {})

    @abstractmethod
    def state(self) -> Payload:
        """Everything needed to resume the server half after a crash."""

    @abstractmethod
    def load_state(self, state: Payload) -> None: ...


@dataclass(frozen=True)
class AlgorithmSpec:
    """A registered algorithm: its two halves, what they send (its wire facts)
    and what its clients train on."""

    client: type[ClientAlgorithm[Any]]
    server: type[ServerAlgorithm[Any]]
    summary: str
    #: what each stage sends, SecAgg+ and DP, the params a node's caps bound
    wire: Wire
    #: what the clients train on: "images", or "bags" (slides as patch embeddings)
    data: str = "images"
    #: an image method whose loss only classifies its input batch (no pixel
    #: transforms, no second encoder): it also trains on cached embeddings of a
    #: frozen encoder (``train.cache_features``)
    features: bool = False


def register_algorithm(
    name: str,
    client: type[ClientAlgorithm[Any]],
    server: type[ServerAlgorithm[Any]],
    params: type | None = None,
    summary: str = "",
    data: str = "images",
    features: bool = False,
    *,
    wire: Wire,
) -> AlgorithmSpec:
    """Register algorithm ``name``: its halves, params class and wire facts.

    ``wire`` is required: the node guard, SecAgg+ and DP decide from it alone
    whether and how the algorithm runs (:mod:`fedpath.wire`). A declaration
    that is missing or binds a cap to a param ``params`` lacks fails here, at
    import, not when a node first meets the algorithm.
    """
    if not isinstance(wire, Wire):
        raise WireError(
            f"algorithm {name!r}: register_algorithm(..., wire=Wire(...)) must "
            f"declare what its clients send (fedpath.wire.Wire), got {wire!r}"
        )
    fields = {f.name for f in dataclasses.fields(params)} if params else set()
    unbound = sorted(set(wire.caps) - fields)
    if unbound:
        raise WireError(
            f"algorithm {name!r}: wire caps bind params {unbound}, which its "
            f"params class {getattr(params, '__name__', None)} does not have"
        )
    spec = AlgorithmSpec(
        client, server, summary or (client.__doc__ or "").strip(), wire, data, features
    )
    ALGORITHMS.register(name, params=params, facts=wire.to_json())(spec)
    return spec


def round_only(clients: Sequence[str], rnd: int) -> dict[str, Payload]:
    """The payloads of a stage that sends nothing but the round number."""
    return {c: Payload({}, {"round": rnd}) for c in clients}


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
