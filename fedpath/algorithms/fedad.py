"""FedAD: federated self-supervised disentanglement with the ATSA curriculum.

FedAD (Section 4, Algorithm 1). Client k, round t:

1. receives the global extractor theta_g^t and the alignment weight lambda_t;
2. sets theta_k <- theta_g^t and keeps a frozen copy as the teacher (theta~_g);
3. trains theta_k and its *local* disentangling head g_k for E epochs on
   L = L_S-CL (Eq. 2) + L_S-Align (Eq. 3) + L_Ortho (Eq. 4), with two SimCLR
   views of every image, z_s, z_d = g_k(f_k(x)) and z_g = p_g(f_g(x));
4. returns only theta_k (the encoder entries). g_k stays in its ClientState.

The server averages the encoders (n_k-weighted, Alg. 1 line 14), measures the
instability Delta (Eq. 5) over the encoder's parameters (BatchNorm running
statistics are statistics, not weights, and are left out) and updates lambda
with the ATSA rule (Eq. 6, :mod:`fedpath.ssl.atsa`), fed either the raw Delta
(``atsa_scale: literal``, the default: the paper as written) or Delta relative
to the mean of the first ``atsa_warmup`` rounds in the paper's units
(``relative``, fedpath's option for CPU-scale models: D = atsa_anchor * Delta /
(Delta_ref + eps)). Per round, results.jsonl gets
``fit/delta`` (raw Eq. 5), ``fit/delta_ref`` (Delta_ref), ``fit/delta_norm`` (the
D Eq. 6 used; = ``fit/delta`` in literal mode), ``fit/lambda_target`` (the bracket
of Eq. 6), ``fit/lambda`` (the weight used in this round) and ``fit/lambda_next``,
together with every loss component (``fit/cl``, ``fit/align``, ``fit/ortho``, and
``fit/align_raw``, the alignment bracket before lambda).

Choices the paper leaves open (documented in docs/fedad.md):

* p_g is a fixed random projection shared by all clients (see
  :func:`fedpath.ssl.heads.teacher_projection`);
* the teacher runs in eval mode (BatchNorm uses the aggregated running
  statistics), on the same two views as the student;
* Eq. 3/4 are a mean over the batch of the per-sample sum over the two views
  (:func:`fedpath.losses.teacher_alignment_loss`);
* ablations: ``gamma=0`` (no orthogonality), ``atsa=false`` with
  ``static_lambda=0.5`` (no ATSA).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fedpath.algorithms.base import ServerContext, derive_seed, register_algorithm
from fedpath.algorithms.ssl_common import (
    SSLClient,
    SSLNet,
    SSLServer,
    frozen_copy,
)
from fedpath.config import ConfigError
from fedpath.losses import nt_xent, orthogonality_loss, teacher_alignment_loss
from fedpath.params.algorithms import FedADParams
from fedpath.ssl.atsa import ATSA, instability
from fedpath.ssl.heads import DisentanglingHead, teacher_projection
from fedpath.types import ArrayDict, ClientState, Payload, Scalar
from fedpath.wire import Wire

LAMBDA = "lambda"


class FedADClient(SSLClient):
    """FedAD client: NT-Xent on z_s + teacher (anti-)alignment + orthogonality."""

    params: FedADParams

    @classmethod
    def build_local(cls, params: Any, feature_dim: int) -> dict[str, nn.Module]:
        p: FedADParams = params
        return {
            "head": DisentanglingHead(
                feature_dim, p.proj_dim, p.proj_dim, p.head_hidden
            )
        }

    def begin(self, net: SSLNet, payload: Payload, state: ClientState) -> None:
        if LAMBDA not in payload.scalars:
            raise ConfigError(
                f"client {self.ctx.client_id}: the FedAD broadcast carries no "
                f"{LAMBDA!r} scalar (is the server half FedAD's?)"
            )
        self.lam = float(payload.scalars[LAMBDA])
        self.teacher = frozen_copy(net.model)  # theta~_g <- theta_g^t (Alg. 1, l. 19)
        seed = derive_seed(self.ctx.seed, "fedad-p_g")  # same p_g at every client
        self.p_g = teacher_projection(
            net.model.feature_dim, self.params.proj_dim, seed
        ).to(self.ctx.device)

    def ssl_loss(
        self, net: SSLNet, view_a: torch.Tensor, view_b: torch.Tensor, x: torch.Tensor
    ) -> dict[str, Any]:
        p = self.params
        n, both = self.joint(view_a, view_b)
        z_s, z_d = net.local["head"](net.encode(both))
        with torch.no_grad():
            z_g = self.p_g(self.teacher.encode(both))  # type: ignore[operator]
        zs_a, zs_b = z_s[:n], z_s[n:]
        cl = nt_xent(zs_a, zs_b, p.temperature)  # Eq. 2

        def views(z: torch.Tensor) -> torch.Tensor:  # (2N, D) -> (N, 2, D)
            return torch.stack([z[:n], z[n:]], dim=1)

        align_raw = teacher_alignment_loss(views(z_s), views(z_d), views(z_g), 1.0)
        align = self.lam * align_raw  # Eq. 3 (linear in lambda_t)
        ortho = orthogonality_loss(views(z_s), views(z_d), p.gamma)  # Eq. 4
        return {
            "loss": cl + align + ortho,  # Eq. 1
            "cl": cl.detach(),
            "align": align.detach(),
            "align_raw": align_raw.detach(),
            "ortho": ortho.detach(),
        }


class FedADServer(SSLServer):
    """FedAvg of the extractor + the ATSA controller (Eq. 5-6)."""

    client_cls = FedADClient
    params: FedADParams

    def __init__(self, params: FedADParams, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.atsa = ATSA(
            params.lambda_min,
            params.lambda_max,
            params.alpha,
            params.k,
            params.eps,
            scale=params.atsa_scale,
            warmup=params.atsa_warmup,
            anchor=params.atsa_anchor,
        )

    def current_lambda(self) -> float:
        return self.atsa.value if self.params.atsa else self.params.static_lambda

    def broadcast_scalars(self, rnd: int) -> dict[str, Scalar]:
        return {LAMBDA: self.current_lambda()}

    def after_aggregate(self, old: ArrayDict, rnd: int) -> dict[str, Scalar]:
        used = self.current_lambda()
        delta = instability(self.weights, old, self.param_keys, self.params.eps)
        self.atsa.step(delta)  # kept up to date (and logged) even when unused
        return {
            "delta": delta,
            "delta_ref": self.atsa.reference,
            "delta_norm": self.atsa.last_norm,
            "lambda_target": self.atsa.last_target,
            "lambda": used,
            "lambda_next": self.current_lambda(),
        }

    def extra_state(self) -> dict[str, Scalar]:
        return dict(self.atsa.state())

    def load_extra_state(self, scalars: Any) -> None:
        self.atsa.load_state(scalars)


register_algorithm(
    "fedad",
    FedADClient,
    FedADServer,
    FedADParams,
    "FedAD: self-supervised disentanglement (local head), teacher alignment, ATSA",
    wire=Wire("encoder weights", {"fit": "weights"}),
)
