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
3. an RDP accountant turns the noise multiplier, the client sampling and the
   rounds so far into the (epsilon, delta) guarantee at the client level,
   reported each round (``fit/epsilon`` in ``results.jsonl``) and in
   ``final.json``: ``accountant: opacus`` (default; Opacus's ``RDPAccountant``,
   the ``dp`` extra: Poisson sampling at rate q = k / n) or ``accountant:
   flower`` (Flower's ``flwr.supercore.privacy_accounting`` RDP accountant,
   backed by Google's ``dp-accounting``, ``pip install -e ".[dp]"``; without
   amplification by sampling, as Flower's own DP strategy wrappers require, so
   equal to Opacus's at q = 1 and an upper bound on it below).

The clip is Flower's ``compute_clip_model_update`` and the noise's standard
deviation Flower's ``compute_stdv`` (``flwr.supercore.differential_privacy``)
when Flower is installed, else the same operations here (a test checks they are
equal bit for bit). Over Flower the node applies the clip with Flower's
``fixedclipping_mod``, after this client half has run
(:mod:`fedpath.runtime.flower.central_dp`); the node then tells this half so
(:data:`NODE_CLIPS`) and the update is clipped once, by the same function, so a
run over Flower equals the run in-process bit for bit. The noise is drawn from
fedpath's seeded generator, not with Flower's ``add_gaussian_noise_inplace``
(unseeded ``np.random``), so a run is reproducible.

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
from fedpath.wire import Wire

#: Payload scalar the node's clipping mod sets on a ``fit`` message (never the
#: coordinator's: the mod overwrites it) when Flower's ``fixedclipping_mod`` will
#: clip the reply after this client half: the half then leaves the clip to it.
NODE_CLIPS = "dp/clipped_at_node"


def float_keys(weights: Mapping[str, np.ndarray]) -> list[str]:
    """The floating entries: what the clip covers."""
    return [k for k, v in weights.items() if v.dtype.kind == "f"]


def update_norm(
    new: Mapping[str, np.ndarray], old: Mapping[str, np.ndarray], keys: list[str]
) -> float:
    """L2 norm of ``new - old`` over ``keys``, in float64."""
    squares = (
        np.square(new[k].astype(np.float64) - old[k].astype(np.float64)).sum()
        for k in keys
    )
    return math.sqrt(sum(float(x) for x in squares))


def clip_update(
    new: Mapping[str, np.ndarray], old: Mapping[str, np.ndarray], clip: float
) -> tuple[ArrayDict, float]:
    """``old + (new - old) * min(1, clip / ||new - old||)`` over the floating
    entries of ``old`` (others as ``new``), and the update's norm before clipping.

    Flower's ``compute_clip_model_update`` (the arithmetic in each entry's own
    dtype, the entries in the order of ``old``), so the clip applied in-process
    and the one Flower's ``fixedclipping_mod`` applies on a node give the same
    bits. An update of norm 0 (in the entries' precision) comes back as it is.
    """
    keys = float_keys(old)
    sent = [np.asarray(old[k]) for k in keys]
    update = [np.asarray(new[k]) for k in keys]
    norm = update_norm(new, old, keys)
    out = dict(new)
    if flower_norm(update, sent) == 0.0:  # Flower's clip would divide by zero
        return out, norm
    clipped = list(update)
    flower_clip(clipped, sent, clip)
    for k, v in zip(keys, clipped, strict=True):
        out[k] = v
    return out, norm


def flower_clip(
    param1: list[np.ndarray], param2: list[np.ndarray], clip: float
) -> None:
    """Flower's ``compute_clip_model_update(param1, param2, clip)`` (in place on
    the list ``param1``); the same operations where Flower is not installed."""
    try:
        from flwr.supercore.differential_privacy import compute_clip_model_update
    except ImportError:
        update = [np.subtract(x, y) for x, y in zip(param1, param2, strict=True)]
        scale = min(1, clip / flower_norm(update))
        for u in update:
            u *= scale
        for i, y in enumerate(param2):
            param1[i] = y + update[i]
        return
    compute_clip_model_update(param1, param2, clip)


def flower_norm(
    arrays: list[np.ndarray], minus: list[np.ndarray] | None = None
) -> float:
    """Flower's ``get_norm`` of ``arrays`` (or of ``arrays - minus``): per-array
    norms in the arrays' dtype, then the root of their sum of squares."""
    if minus is not None:
        arrays = [np.subtract(x, y) for x, y in zip(arrays, minus, strict=True)]
    norms = [np.linalg.norm(a.flat) for a in arrays]
    return float(np.sqrt(sum([n**2 for n in norms])))


def noise_std(noise_multiplier: float, clip: float, clients: int) -> float:
    """Flower's ``compute_stdv``: ``noise_multiplier * clip / clients``."""
    try:
        from flwr.supercore.differential_privacy import compute_stdv
    except ImportError:
        return float((noise_multiplier * clip) / clients)
    return compute_stdv(noise_multiplier, clip, clients)


def epsilon(
    noise_multiplier: float, sample_rate: float, rounds: int, delta: float
) -> float:
    """Client-level epsilon after ``rounds`` rounds (Opacus's RDP accountant,
    Poisson sampling at ``sample_rate``; inf: no noise)."""
    if noise_multiplier <= 0:
        return math.inf
    try:
        from opacus.accountants import RDPAccountant
    except ImportError:
        raise ConfigError(
            "algorithm 'dp_fedavg' needs Opacus for its privacy accountant: "
            'pip install -e ".[dp]" (or algorithm.params.accountant=flower)'
        ) from None
    acc = RDPAccountant()
    acc.history = [(noise_multiplier, sample_rate, rounds)]
    return float(acc.get_epsilon(delta))


def epsilon_flower(
    noise_multiplier: float, sampled: int, population: int, rounds: int, delta: float
) -> float:
    """Client-level epsilon after ``rounds`` rounds of ``sampled`` of
    ``population`` clients, from Flower's RDP accountant
    (``flwr.supercore.privacy_accounting``) without amplification by sampling,
    as Flower's ``DifferentialPrivacy*FixedClipping`` wrappers account (inf: no
    noise)."""
    if noise_multiplier <= 0:
        return math.inf
    try:
        from flwr.supercore.privacy_accounting import (
            GaussianPrivacyEvent,
            NeighboringRelation,
            PrivacyConfig,
            SamplingMethod,
        )
        from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

        acc = RdpAccountant(
            PrivacyConfig(
                target_delta=delta,
                population_size=population,
                neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                sampling_method=SamplingMethod.NO_AMPLIFICATION,
            )
        )
    except ImportError as err:
        raise ConfigError(
            "config key 'algorithm.params.accountant': 'flower' needs Flower's "
            f'RDP accountant ({err}): pip install -e ".[dp]" (or accountant=opacus)'
        ) from None
    acc.compose(
        GaussianPrivacyEvent(noise_multiplier, sampled, population), count=rounds
    )
    return acc.get_epsilon(delta)


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
        if payload.scalars.get(NODE_CLIPS) is True:
            return reply  # Flower's fixedclipping_mod clips it on the node, next
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
        self.population = n
        self.sampled = min(k, n)
        self.sample_rate = min(1.0, k / n)
        # at the start, not after a round: an accountant missing is a clear error
        self.epsilon(1)

    def epsilon(self, rounds: int) -> float:
        """The client-level epsilon after ``rounds`` rounds (``accountant``)."""
        p = self.params
        if p.accountant == "flower":
            return epsilon_flower(
                p.noise_multiplier, self.sampled, self.population, rounds, p.delta
            )
        return epsilon(p.noise_multiplier, self.sample_rate, rounds, p.delta)

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if not replies:
            raise ProtocolError(f"round {rnd}: no client replied to stage {stage!r}")
        p = self.params
        cids = sorted(replies)
        m = len(cids)
        keys = float_keys(self.weights)
        rng = np.random.default_rng(derive_seed(self.ctx.seed, rnd, "dp-noise"))
        std = noise_std(p.noise_multiplier, p.clip, m)
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
        out["epsilon"] = self.epsilon(rnd)
        out["noise_std"] = std
        return out


register_algorithm(
    "dp_fedavg",
    DPFedAvgClient,
    DPFedAvgServer,
    DPFedAvgParams,
    "DP-FedAvg (McMahan et al. 2018): clipped client updates, Gaussian noise, "
    "RDP accountant",
    wire=Wire(
        "clipped weights (noised at the coordinator)",
        {"fit": "weights"},
        secagg="equal",
        dp_clip=True,
        caps={"clip": "max_dp_clip"},
    ),
)

__all__ = [
    "NODE_CLIPS",
    "DPFedAvgClient",
    "DPFedAvgServer",
    "clip_update",
    "epsilon",
    "epsilon_flower",
    "float_keys",
    "flower_clip",
    "flower_norm",
    "noise_std",
    "update_norm",
]
