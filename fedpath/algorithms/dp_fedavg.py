"""Client-level differential privacy for weight averaging: DP-FedAvg.

McMahan, Ramage, Talwar and Zhang (ICLR 2018). Per round:

1. each sampled client trains locally as in FedAvg, then **clips** its update
   ``delta = w_local - w_global`` to L2 norm ``clip`` (over every floating entry
   of the model) and uploads ``w_global + delta * min(1, clip / ||delta||)``: the
   coordinator never sees an unclipped update;
2. the server averages the clipped updates with **equal** weights (an example
   count would change the sensitivity) and adds Gaussian noise of standard
   deviation ``noise_multiplier * clip / m`` to every coordinate (m: clients in
   the round), so one client's contribution is hidden by noise of
   ``noise_multiplier`` times its maximal influence;
3. an RDP accountant (Opacus's ``RDPAccountant``, the ``dp`` extra) turns the
   noise multiplier, the client sampling rate q = m / n and the rounds so far
   into the (epsilon, delta) guarantee at the client level, reported each round
   (``fit/epsilon`` in ``results.jsonl``) and in ``final.json``.

BatchNorm running statistics are data-dependent and not parameters the clip
covers, so a model with BatchNorm must keep them frozen (``train.bn: frozen``,
e.g. a pretrained encoder's ImageNet statistics) or use GroupNorm
(``model.params.norm: group``); anything else is refused at the start, naming
both options. The same server half runs in-process and over Flower: the noise is
added by the coordinator (central DP, with the clip at the hospital). Without
noise (``noise_multiplier: 0``) epsilon is infinite (reported as null).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from torch import nn

from fedpath.algorithms.base import (
    ProtocolError,
    ServerContext,
    derive_seed,
    register_algorithm,
    weighted_mean_scalars,
)
from fedpath.algorithms.fedavg import FedAvgServer, WeightsClient
from fedpath.algorithms.names import FIT, WEIGHTS
from fedpath.config import ConfigError
from fedpath.params.algorithms import DPFedAvgParams
from fedpath.types import ArrayDict, ClientState, Payload, Scalar


def _float_keys(weights: Mapping[str, np.ndarray]) -> list[str]:
    return [k for k, v in weights.items() if v.dtype.kind == "f"]


def clip_update(
    new: Mapping[str, np.ndarray], old: Mapping[str, np.ndarray], clip: float
) -> tuple[ArrayDict, float]:
    """``old + (new - old) * min(1, clip / ||new - old||)`` over the floating
    entries (others as ``new``), and the update's norm before clipping."""
    keys = _float_keys(old)
    deltas = {k: new[k].astype(np.float64) - old[k].astype(np.float64) for k in keys}
    norm = math.sqrt(sum(float((d * d).sum()) for d in deltas.values()))
    scale = min(1.0, clip / norm) if norm > 0 else 1.0
    out = dict(new)
    for k in keys:
        out[k] = (old[k].astype(np.float64) + deltas[k] * scale).astype(old[k].dtype)
    return out, norm


def epsilon(
    noise_multiplier: float, sample_rate: float, rounds: int, delta: float
) -> float:
    """Client-level epsilon after ``rounds`` rounds (RDP accountant; inf: no noise)."""
    if noise_multiplier <= 0:
        return math.inf
    try:
        from opacus.accountants import RDPAccountant
    except ImportError:
        raise ConfigError(
            "algorithm 'dp_fedavg' needs Opacus for its privacy accountant: "
            'pip install -e ".[dp]"'
        ) from None
    acc = RDPAccountant()
    acc.history = [(noise_multiplier, sample_rate, rounds)]
    return float(acc.get_epsilon(delta))


def check_norms(model: nn.Module, bn: str) -> None:
    """Refuse BatchNorm running statistics that would train (and leak)."""
    tracking = [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
    ]
    if tracking and bn != "frozen":
        raise ConfigError(
            f"config key 'train.bn': {bn!r}, but dp_fedavg cannot protect BatchNorm "
            f"running statistics ({len(tracking)} layers, e.g. {tracking[0]!r}: "
            "data-dependent, outside the clipped update); use train.bn=frozen "
            "(keep e.g. the pretrained statistics) or model.params.norm=group"
        )


class DPFedAvgClient(WeightsClient):
    """FedAvg's local training; the upload is the clipped update."""

    params: DPFedAvgParams

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage != FIT:
            raise ProtocolError(f"dp_fedavg has no stage {stage!r}")
        reply = super().handle(stage, payload, state)
        # the pre-clip norm stays here: releasing it would bypass the clip
        clipped, _ = clip_update(
            reply.group(WEIGHTS), payload.group(WEIGHTS), self.params.clip
        )
        return Payload({WEIGHTS: clipped}, dict(reply.scalars))


class DPFedAvgServer(FedAvgServer):
    """Equal-weight mean of clipped updates plus Gaussian noise; epsilon per round."""

    params: DPFedAvgParams

    def __init__(self, params: DPFedAvgParams, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        check_norms(ctx.build_model(), ctx.task.train.bn)
        train = ctx.task.train
        n = len(ctx.client_ids)
        k = train.clients_per_round or max(1, round(train.client_fraction * n))
        self.sample_rate = min(1.0, k / n)
        # at the start, not after a round: Opacus missing is a clear error
        epsilon(params.noise_multiplier, self.sample_rate, 1, params.delta)

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if not replies:
            raise ProtocolError(f"round {rnd}: no client replied to stage {stage!r}")
        p = self.params
        cids = sorted(replies)
        m = len(cids)
        keys = _float_keys(self.weights)
        rng = np.random.default_rng(derive_seed(self.ctx.seed, rnd, "dp-noise"))
        std = p.noise_multiplier * p.clip / m
        new: ArrayDict = dict(self.weights)
        for k in keys:
            old = self.weights[k].astype(np.float64)
            total = np.zeros_like(old)
            for c in cids:
                total += replies[c].group(WEIGHTS)[k].astype(np.float64) - old
            noise = rng.normal(0.0, std, size=old.shape) if std > 0 else 0.0
            new[k] = (old + total / m + noise).astype(self.weights[k].dtype)
        self.weights = new
        out: dict[str, Any] = dict(weighted_mean_scalars(replies))
        eps = epsilon(p.noise_multiplier, self.sample_rate, rnd, p.delta)
        out["epsilon"] = eps
        out["noise_std"] = std
        return out


register_algorithm(
    "dp_fedavg",
    DPFedAvgClient,
    DPFedAvgServer,
    DPFedAvgParams,
    "DP-FedAvg (McMahan et al. 2018): clipped client updates, Gaussian noise, "
    "RDP accountant",
)

__all__ = ["DPFedAvgClient", "DPFedAvgServer", "clip_update", "epsilon"]
