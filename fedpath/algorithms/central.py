"""Centralized upper bounds of FedAD's Table 6: pooled SimCLR and pooled supervised.

NOT privacy-preserving, by design: in round 1 every client uploads its training
images (``central_supervised`` also its labels) and the coordinator pools them.
Each round one client (the first of the sampled ones, in sorted order) receives
the pool with the current weights and trains on *all* of it with the ordinary
local loop, so the whole pooled data set is seen once per local epoch: a
centralized run expressed in the federated interface (the runtime has no pooled
partition). Evaluate with ``evaluation.protocol: linear_probe`` like the rest.

* ``central_simclr``: SimCLR (NT-Xent, projection head) on the pooled images.
* ``central_supervised``: cross-entropy of the FedModel (encoder + classifier)
  on the pooled labelled images; the classifier travels with the weights.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from fedpath.algorithms.base import (
    ProtocolError,
    ServerContext,
    register_algorithm,
    round_only,
)
from fedpath.algorithms.fedavg_ssl import FedAvgSSLParams, SimCLRClient, SimCLRServer
from fedpath.algorithms.names import FIT, POOL, UPLOAD
from fedpath.algorithms.ssl_common import SSLClient, SSLNet
from fedpath.data.base import ImageStore, Split
from fedpath.models.backbones import FedModel
from fedpath.types import ArrayDict, ClientState, Payload, Scalar, as_numpy_dict
from fedpath.wire import Wire


def _pooled_split(pool: ArrayDict, like: ImageStore) -> Split:
    """The pooled uploads as one split, in a store of the clients' kind (images,
    or the embeddings of ``train.cache_features``)."""
    images = torch.from_numpy(np.ascontiguousarray(pool["images"]))
    n = int(images.shape[0])
    labels = pool.get("labels", np.zeros(n, np.int64)).astype(np.int64)
    store = like.holding(images)
    if "soft_targets" in pool:  # train.soft_labels: the labels' agreement
        store.soft_targets = np.asarray(pool["soft_targets"], dtype=np.float32)
    return Split(
        store,
        np.arange(n, dtype=np.int64),
        labels,
        np.full(n, "pooled"),
        np.full(n, "pooled"),
    )


class _PoolingClient(SSLClient):
    send_labels = False

    def handle_other(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage != UPLOAD:
            return super().handle_other(stage, payload, state)
        data = self.ctx.data
        up = {"images": data.load(np.arange(len(data))).numpy()}
        if self.send_labels:
            up["labels"] = data.labels.astype(np.int64)
            soft = data.store.soft_targets
            if soft is not None and self.ctx.train.soft_labels != "none":
                up["soft_targets"] = soft[data.indices].astype(np.float32)
        return Payload({POOL: up}, {"num_images": len(data)})

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage == FIT:
            self.ctx = dataclasses.replace(
                self.ctx, data=_pooled_split(payload.group(POOL), self.ctx.data.store)
            )
        return super().handle(stage, payload, state)


class _PoolingServer(SimCLRServer):
    def __init__(self, params: Any, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.pool: ArrayDict = {}

    def stages(self, rnd: int) -> Sequence[str]:
        return (UPLOAD, FIT) if not self.pool else (FIT,)

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        if stage == UPLOAD:
            return round_only(clients, rnd)
        trainer = sorted(clients)[0]
        msg = super().configure(stage, rnd, [trainer])
        msg[trainer].arrays[POOL] = self.pool
        return msg

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if stage != UPLOAD:
            return super().aggregate(stage, rnd, replies)
        if not replies:
            raise ProtocolError(f"round {rnd}: no client uploaded its images")
        groups = [replies[c].group(POOL) for c in sorted(replies)]
        self.pool = {k: np.concatenate([g[k] for g in groups]) for k in groups[0]}
        return {"pooled_images": len(self.pool["images"])}

    def state(self) -> Payload:
        out = super().state()
        out.arrays[POOL] = self.pool
        return out

    def load_state(self, state: Payload) -> None:
        super().load_state(state)
        self.pool = dict(state.arrays.get(POOL, {}))


class CentralSimCLRClient(_PoolingClient, SimCLRClient):
    """Uploads its images; trains SimCLR on the pool when chosen."""


class CentralSimCLRServer(_PoolingServer):
    client_cls = CentralSimCLRClient


class CentralSupervisedClient(_PoolingClient):
    """Uploads images and labels; trains the whole FedModel with CE on the pool."""

    send_labels = True

    def loss(self, net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        assert isinstance(net, SSLNet)
        ce = self.ctx.cross_entropy(net.model(x), y)
        return {"loss": ce, "ce": ce.detach()}

    def upload_entries(self, model: FedModel) -> ArrayDict:
        return as_numpy_dict(model.state_dict())


class CentralSupervisedServer(_PoolingServer):
    client_cls = CentralSupervisedClient
    prefixes = ("encoder.", "classifier.")


register_algorithm(
    "central_simclr",
    CentralSimCLRClient,
    CentralSimCLRServer,
    FedAvgSSLParams,
    "Centralized SimCLR upper bound (clients upload their images: not private)",
    wire=Wire("every training image", {"upload": "raw data", "fit": "weights"}),
)
register_algorithm(
    "central_supervised",
    CentralSupervisedClient,
    CentralSupervisedServer,
    FedAvgSSLParams,
    "Centralized supervised upper bound (images + labels pooled: not private)",
    features=True,
    wire=Wire(
        "every training image and its label (with train.soft_labels, the label's "
        "agreement too)",
        {"upload": "raw data", "fit": "weights"},
    ),
)
