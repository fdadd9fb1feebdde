"""The client and server halves shared by the self-supervised methods.

FedAD, FedAvg-SSL, FedProx-SSL, MOON, FedDis and ELCFS all train the encoder h of
a :class:`~fedpath.models.backbones.FedModel` without labels, plus heads that are
either aggregated (SimCLR's projection head in FedAvg-SSL) or kept at the client
(FedAD's disentangling head). What crosses the network is explicit:

* ``weights``: the encoder's ``state_dict`` entries (``encoder.*``), the global
  extractor; the classifier g of the FedModel is never trained and never sent;
* ``shared``: the heads the method aggregates (absent for FedAD);
* local heads live in the :class:`ClientState` group ``local_heads`` and never
  appear in a payload (asserted in the tests).

Labels are never read: the loss sees the batch's images only. The local loop is
:meth:`fedpath.tasks.images.ImageTask.fit` run on an :class:`SSLNet` (encoder +
heads), so the optimizer covers the heads too and only that loop steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import nn

from fedpath.algorithms.aggregation import weighted_average
from fedpath.algorithms.base import (
    ClientAlgorithm,
    ProtocolError,
    ServerAlgorithm,
    ServerContext,
    derive_seed,
    weighted_mean_scalars,
)
from fedpath.algorithms.names import FIT, LOCAL_HEADS, SHARED, WEIGHTS
from fedpath.config import ConfigError
from fedpath.models.backbones import FedModel
from fedpath.params.algorithms import SSLParams
from fedpath.ssl.augment import simclr_augment
from fedpath.types import ArrayDict, ClientState, Payload, Scalar, as_numpy_dict

ENCODER_PREFIX = "encoder."


class SSLNet(nn.Module):
    """What the local loop trains: the FedModel plus shared and local heads."""

    def __init__(self, model: FedModel, shared: nn.ModuleDict, local: nn.ModuleDict):
        super().__init__()
        self.model = model
        self.shared = shared
        self.local = local

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.encode(x)


def encoder_entries(model: nn.Module) -> ArrayDict:
    """The ``encoder.*`` state_dict entries (the global extractor) as numpy."""
    return {
        k: v
        for k, v in as_numpy_dict(model.state_dict()).items()
        if k.startswith(ENCODER_PREFIX)
    }


def load_entries(module: nn.Module, entries: ArrayDict, what: str) -> None:
    """Load named entries into ``module``; unknown names are a protocol error."""
    own = module.state_dict()
    unknown = sorted(set(entries) - set(own))
    if unknown:
        raise ProtocolError(f"{what}: entries the model lacks: {unknown[:5]}")
    module.load_state_dict(
        {**own, **{k: torch.from_numpy(v) for k, v in entries.items()}}
    )


def frozen_copy(module: nn.Module) -> nn.Module:
    """A deep copy in eval mode with no gradients (a frozen teacher)."""
    import copy

    twin = copy.deepcopy(module).eval()
    for p in twin.parameters():
        p.requires_grad_(False)
    return twin


class SSLClient(ClientAlgorithm):
    """Client half: two SimCLR views per batch, :meth:`ssl_loss`, upload encoder.

    Subclasses set :meth:`build_shared` / :meth:`build_local` (heads by name) and
    implement :meth:`ssl_loss`; :meth:`begin` and :meth:`end` bracket local
    training (frozen teachers, previous models).
    """

    params: SSLParams

    @classmethod
    def build_shared(cls, params: Any, feature_dim: int) -> dict[str, nn.Module]:
        """Heads aggregated with the encoder (built identically by the server)."""
        return {}

    @classmethod
    def build_local(cls, params: Any, feature_dim: int) -> dict[str, nn.Module]:
        """Heads that never leave the client."""
        return {}

    def begin(self, net: SSLNet, payload: Payload, state: ClientState) -> None:
        """Per-round set-up after the broadcast weights are loaded."""

    def end(self, net: SSLNet, state: ClientState) -> None:
        """After local training, before the reply is built."""

    def reply_scalars(self) -> dict[str, Scalar]:
        return {}

    def upload_entries(self, model: FedModel) -> ArrayDict:
        """The model entries sent back (the encoder: the global extractor)."""
        return encoder_entries(model)

    def ssl_loss(
        self, net: SSLNet, view_a: torch.Tensor, view_b: torch.Tensor, x: torch.Tensor
    ) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def joint(view_a: torch.Tensor, view_b: torch.Tensor) -> tuple[int, torch.Tensor]:
        """``(N, [view_a; view_b])``: both views as one batch of ``2N`` images, so
        one forward pass encodes them; rows ``:N`` are view a, ``N:`` view b."""
        return view_a.shape[0], torch.cat([view_a, view_b])

    def views(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Two independent SimCLR views T(x) of a batch in [0, 1]."""
        with torch.no_grad():
            return (
                simclr_augment(x, self.generator, self.aug),
                simclr_augment(x, self.generator, self.aug),
            )

    def loss(self, net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        # y is ignored on purpose: the clients are unlabeled (FedAD Section 4.1)
        assert isinstance(net, SSLNet)
        a, b = self.views(x)
        return self.ssl_loss(net, a, b, x)

    def check_data(self) -> None:
        """NT-Xent needs pairs: at least 2 images per batch and per client."""
        bs = self.ctx.train.batch_size
        if bs < 2:
            raise ConfigError(
                f"config key 'train.batch_size': client {self.ctx.client_id} would "
                f"train on batches of {bs} image; NT-Xent (contrastive) needs at "
                "least 2 images per batch"
            )
        n = len(self.ctx.data)
        if n < 2:
            raise ConfigError(
                f"client {self.ctx.client_id} (domain {self.ctx.domain!r}) holds {n} "
                "training image; NT-Xent needs at least 2 per batch (raise "
                "'partition.min_client_size' to 2 or more)"
            )

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage != FIT:
            return self.handle_other(stage, payload, state)
        self.check_data()
        ctx = self.ctx
        model = ctx.task.images().build_model()
        load_entries(model, payload.group(WEIGHTS), f"client {ctx.client_id} weights")
        fdim = model.feature_dim
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(ctx.seed, ctx.client_id, "local-heads"))
            local = nn.ModuleDict(self.build_local(self.params, fdim))
        shared = nn.ModuleDict(self.build_shared(self.params, fdim))
        if shared:
            load_entries(shared, payload.group(SHARED), f"client {ctx.client_id} heads")
        if LOCAL_HEADS in state.arrays:
            load_entries(local, state.arrays[LOCAL_HEADS], f"client {ctx.client_id}")
        net = SSLNet(model, shared, local).to(ctx.device)
        self.aug = self.params.augmentation()
        self.generator = torch.Generator().manual_seed(ctx.seed_for("augment"))
        self.begin(net, payload, state)
        scalars = ctx.fit_images(net, self.loss)
        self.end(net, state)
        if len(local):
            state.arrays[LOCAL_HEADS] = as_numpy_dict(local.state_dict())
        arrays = {WEIGHTS: self.upload_entries(model)}
        if shared:
            arrays[SHARED] = as_numpy_dict(shared.state_dict())
        return Payload(
            arrays, {"num_examples": len(ctx.data), **scalars, **self.reply_scalars()}
        )

    def handle_other(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        raise ProtocolError(f"{type(self).__name__} has no stage {stage!r}")


class SSLServer(ServerAlgorithm):
    """FedAvg over the encoder entries and the shared heads (example-weighted)."""

    client_cls: ClassVar[type[SSLClient]] = SSLClient
    #: state_dict entries of the FedModel that are aggregated and broadcast
    prefixes: ClassVar[tuple[str, ...]] = (ENCODER_PREFIX,)

    def __init__(self, params: Any, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.weights: ArrayDict = {
            k: v for k, v in ctx.initial_weights.items() if k.startswith(self.prefixes)
        }
        with torch.random.fork_rng(devices=[]):
            probe = ctx.task.images().build_model()
            self.param_keys = [
                k for k, _ in probe.named_parameters() if k.startswith(ENCODER_PREFIX)
            ]
            torch.manual_seed(derive_seed(ctx.seed, "shared-heads"))
            heads = nn.ModuleDict(
                self.client_cls.build_shared(params, probe.feature_dim)
            )
        self.shared: ArrayDict = as_numpy_dict(heads.state_dict())

    def broadcast_scalars(self, rnd: int) -> dict[str, Scalar]:
        return {}

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        if stage != FIT:
            raise ProtocolError(f"{type(self).__name__} has no stage {stage!r}")
        arrays = {WEIGHTS: self.weights}
        if self.shared:
            arrays[SHARED] = self.shared
        extra = self.broadcast_scalars(rnd)
        return {c: Payload(dict(arrays), {"round": rnd, **extra}) for c in clients}

    def after_aggregate(self, old: ArrayDict, rnd: int) -> dict[str, Scalar]:
        """Server-side controllers (ATSA): ``old`` is theta_t, the new weights t+1."""
        return {}

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if stage != FIT:
            raise ProtocolError(f"{type(self).__name__} has no stage {stage!r}")
        if not replies:
            raise ProtocolError(f"round {rnd}: no client replied to stage {stage!r}")
        cids = sorted(replies)
        counts = [float(replies[c].scalars["num_examples"]) for c in cids]
        policy = self.params.bn_buffers
        old = self.weights
        self.weights = weighted_average(
            [replies[c].group(WEIGHTS) for c in cids], counts, list(old), policy
        )
        if self.shared:
            self.shared = weighted_average(
                [replies[c].group(SHARED) for c in cids], counts, list(self.shared)
            )
        return {**weighted_mean_scalars(replies), **self.after_aggregate(old, rnd)}

    def global_weights(self) -> ArrayDict:
        return self.weights

    def extra_state(self) -> dict[str, Scalar]:
        return {}

    def load_extra_state(self, scalars: Mapping[str, Scalar]) -> None:
        """Restore what :meth:`extra_state` saved."""

    def state(self) -> Payload:
        arrays = {WEIGHTS: self.weights}
        if self.shared:
            arrays[SHARED] = self.shared
        return Payload(arrays, self.extra_state())

    def load_state(self, state: Payload) -> None:
        self.weights = dict(state.group(WEIGHTS))
        if self.shared:
            self.shared = dict(state.group(SHARED))
        self.load_extra_state(state.scalars)
