"""MOON (Li, He, Song, CVPR 2021) on federated SimCLR, as the FedAD paper runs it.

Local loss: NT-Xent over two SimCLR views (the self-supervised stand-in for
MOON's supervised term) + mu * l_con, the model-contrastive loss
(:func:`fedpath.losses.moon_contrastive`): the local representation of a view is
pulled to that of the frozen global model received this round and pushed from
that of this client's previous local model (buffer of one, kept in the
ClientState group ``moon_prev``; absent in a client's first round, when l_con is
0). FedAD Section 5.6 applies l_con "between the feature extractor outputs (h_k
and h_g)" with mu = 1.0: ``contrast_on="features"`` (default); MOON's own choice,
the projection output, is ``contrast_on="projection"``. l_con is the mean over
the two views. Encoder and projection head are aggregated (FedAvg).
"""

from __future__ import annotations

from typing import Any

import torch

from fedpath.algorithms.base import register_algorithm
from fedpath.algorithms.fedavg_ssl import SimCLRClient, SimCLRServer
from fedpath.algorithms.names import MOON_PREV
from fedpath.algorithms.ssl_common import (
    SSLNet,
    encoder_entries,
    frozen_copy,
    load_entries,
)
from fedpath.losses import moon_contrastive
from fedpath.params.algorithms import MOONParams
from fedpath.types import ClientState, Payload, as_numpy_dict
from fedpath.wire import Wire


class MOONClient(SimCLRClient):
    """SimCLR + mu * model-contrastive loss against the global / previous model."""

    params: MOONParams

    def begin(self, net: SSLNet, payload: Payload, state: ClientState) -> None:
        self.glob = frozen_copy(net)
        self.prev: SSLNet | None = None
        if MOON_PREV in state.arrays:
            prev = frozen_copy(net)
            assert isinstance(prev, SSLNet)
            saved = state.arrays[MOON_PREV]
            load_entries(
                prev.model,
                {k: v for k, v in saved.items() if k.startswith("encoder.")},
                f"client {self.ctx.client_id} previous model",
            )
            load_entries(
                prev.shared,
                {k[5:]: v for k, v in saved.items() if k.startswith("head.")},
                f"client {self.ctx.client_id} previous head",
            )
            self.prev = prev

    def rep(self, net: Any, x: torch.Tensor) -> torch.Tensor:
        h = net.encode(x)
        return h if self.params.contrast_on == "features" else net.shared["proj"](h)

    def ssl_loss(
        self, net: SSLNet, view_a: torch.Tensor, view_b: torch.Tensor, x: torch.Tensor
    ) -> dict[str, Any]:
        p = self.params
        n, both = self.joint(view_a, view_b)
        cl, h, z = self.simclr(net, view_a, view_b)
        r = h if p.contrast_on == "features" else z
        with torch.no_grad():
            r_glob = self.rep(self.glob, both)
            r_prev = None if self.prev is None else self.rep(self.prev, both)
        con = 0.5 * sum(
            moon_contrastive(
                r[s],
                r_glob[s],
                None if r_prev is None else r_prev[s],
                p.moon_temperature,
            )
            for s in (slice(0, n), slice(n, 2 * n))
        )
        con_t = torch.as_tensor(con)
        return {"loss": cl + p.mu * con_t, "cl": cl.detach(), "con": con_t.detach()}

    def end(self, net: SSLNet, state: ClientState) -> None:
        heads = {
            f"head.{k}": v for k, v in as_numpy_dict(net.shared.state_dict()).items()
        }
        state.arrays[MOON_PREV] = {**encoder_entries(net.model), **heads}


class MOONServer(SimCLRServer):
    client_cls = MOONClient


register_algorithm(
    "moon",
    MOONClient,
    MOONServer,
    MOONParams,
    "MOON (Li et al. 2021) on federated SimCLR: NT-Xent + mu * model-contrastive",
    wire=Wire("weights", {"fit": "weights"}),
)
