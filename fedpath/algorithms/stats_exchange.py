"""The statistics-exchange protocol shared by FedStain and FedCCRL-style methods.

FedStain Algorithm 2, lines 3-9 (and FedCCRL's style sharing): in a ``stats``
stage each client computes per-image statistics of ceil(r * n_i) of its images and
uploads them; the server pools them and, in the ``fit`` stage, sends every client
the pool *without its own entries*, alongside the global weights. The pool is
refreshed every round (``refresh="round"``, FedCCRL) or collected once
(``refresh="once"``).

Uploads are validated: an upload with the wrong keys, a wrong shape or a non-finite
value is rejected, the client is named in the log, and the round goes on without it.
Besides model weights only these statistics leave a client (asserted by
:func:`audit_payload` in the tests).

A client whose received pool is empty (a one-client federation, or every other
upload rejected) falls back to statistics of its own images, which never leave it;
``empty_pool="error"`` raises instead.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

import numpy as np
import torch
from torch import nn

from fedpath.algorithms.base import (
    ProtocolError,
    ServerContext,
    derive_seed,
    round_only,
)
from fedpath.algorithms.fedavg import FedAvgServer, WeightsClient
from fedpath.algorithms.names import FIT, POOL, STATS, WEIGHTS
from fedpath.types import ArrayDict, ClientState, Payload, Scalar

log = logging.getLogger("fedpath")


class StatsParams(Protocol):
    """What the statistics exchange reads from a method's params dataclass."""

    # read-only members: params dataclasses are frozen
    @property
    def upload_ratio(self) -> float: ...
    @property
    def refresh(self) -> Literal["round", "once"]: ...
    @property
    def empty_pool(self) -> Literal["own", "error"]: ...
    @property
    def bn_buffers(self) -> Literal["average", "pooled"]: ...

    def stat_layout(self) -> dict[str, tuple[int, int]]:
        """name -> (channels, statistics) of every uploaded array."""
        ...


class StatsExchangeClient(WeightsClient):
    """Client half: answers ``stats`` with :meth:`compute_stats`, trains in ``fit``.

    The params dataclass provides ``upload_ratio`` and ``stat_layout()`` (name ->
    (channels, statistics) of every uploaded array, shared with the server so it
    can validate uploads). Subclasses implement :meth:`compute_stats` (float images
    in [0, 1] to named ``(n, C, k)`` arrays) and read ``self.pool`` (the received
    statistics, or the fallback) in their loss.
    """

    params: StatsParams

    def compute_stats(self, images: torch.Tensor) -> ArrayDict:
        raise NotImplementedError

    def upload_ratio(self) -> float:
        return float(self.params.upload_ratio)

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage != STATS:
            return super().handle(stage, payload, state)
        n = len(self.ctx.data)
        k = min(n, math.ceil(self.upload_ratio() * n))
        rng = np.random.default_rng(self.ctx.seed_for("stats"))
        idx = np.sort(rng.choice(n, size=k, replace=False))
        stats = self._stats_of(idx) if k else self._empty_stats()
        return Payload({STATS: self._defend(stats)}, {"num_images": k})

    def _defend(self, stats: ArrayDict) -> ArrayDict:
        """The upload after the leakage defences the params ask for
        (:func:`defend_statistics`)."""
        noise = float(getattr(self.params, "stats_noise", 0.0))
        decimals = getattr(self.params, "stats_decimals", None)
        if not noise and decimals is None:
            return stats
        rng = np.random.default_rng(self.ctx.seed_for("stats-noise"))
        return defend_statistics(stats, noise, decimals, rng)

    def _stats_of(self, positions: np.ndarray, chunk: int = 256) -> ArrayDict:
        parts: list[ArrayDict] = []
        for s in range(0, len(positions), chunk):
            imgs = self.ctx.data.load(positions[s : s + chunk]).float().div_(255.0)
            parts.append(self.compute_stats(imgs))
        return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}

    def _empty_stats(self) -> ArrayDict:
        return {
            key: np.zeros((0, *shape), np.float32)
            for key, shape in self.params.stat_layout().items()
        }

    def begin(self, model: nn.Module, payload: Payload, state: ClientState) -> None:
        pool = dict(payload.arrays.get(POOL, {}))
        self.pool_is_own = not pool or min(len(v) for v in pool.values()) == 0
        if self.pool_is_own:
            if self.params.empty_pool == "error":
                raise ProtocolError(
                    f"client {self.ctx.client_id}: the statistics pool it received is "
                    "empty (one-client federation, or upload_ratio too small); set "
                    "algorithm.params.empty_pool=own to fall back to local statistics"
                )
            log.warning(
                "client %s received an empty statistics pool; augmenting with its "
                "own statistics (they do not leave the client)",
                self.ctx.client_id,
            )
            n = len(self.ctx.data)
            k = min(n, max(1, math.ceil(self.upload_ratio() * n)))
            rng = np.random.default_rng(self.ctx.seed_for("own-stats"))
            pool = self._stats_of(np.sort(rng.choice(n, size=k, replace=False)))
        self.pool: ArrayDict = pool
        self.generator = torch.Generator().manual_seed(self.ctx.seed_for("augment"))


def defend_statistics(
    stats: ArrayDict, noise: float, decimals: int | None, rng: np.random.Generator
) -> ArrayDict:
    """Statistics as they leave a client with the leakage defences on.

    Gaussian noise of ``noise`` x each statistic's spread over this upload (per
    channel and statistic), then rounding to ``decimals`` decimals. Without them
    an entry is an exact fingerprint of its image: a candidate image's recomputed
    statistics match it exactly (``benchmarks/bench_leakage.py``).
    """
    out: ArrayDict = {}
    for key, v in stats.items():
        a = np.asarray(v, dtype=np.float64)
        if noise and len(a) > 1:
            spread = a.std(axis=0, keepdims=True)
            a = a + rng.normal(size=a.shape) * noise * spread
        if decimals is not None:
            a = np.round(a, int(decimals))
        out[key] = a.astype(np.float32)
    return out


class StatsExchangeServer(FedAvgServer):
    """FedAvg server plus the statistics pool (stats stage, per-client pools)."""

    params: StatsParams

    def __init__(self, params: Any, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.pools: dict[str, ArrayDict] = {}
        self.shapes: dict[str, tuple[int, int]] = params.stat_layout()

    def stages(self, rnd: int) -> Sequence[str]:
        if self.params.refresh == "round" or rnd == 1 or not self.pools:
            return (STATS, FIT)
        return (FIT,)

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        if stage == STATS:
            return round_only(clients, rnd)
        messages = super().configure(stage, rnd, clients)
        for c, msg in messages.items():
            msg.arrays[POOL] = self.pool_for(c, rnd)
        return messages

    def pool_for(self, client: str, rnd: int = 0) -> ArrayDict:
        """Every pooled entry except ``client``'s own (Alg. 2, line 9); with
        ``shuffle_pool`` in an order drawn per (round, client), so a receiver
        cannot tell which hospital an entry came from by its position."""
        others = [self.pools[o] for o in sorted(self.pools) if o != client]
        others = [p for p in others if p and min(len(v) for v in p.values())]
        if not others:
            return {}
        pool = {k: np.concatenate([p[k] for p in others]) for k in others[0]}
        if getattr(self.params, "shuffle_pool", False):
            rng = np.random.default_rng(
                derive_seed(self.ctx.seed, rnd, "pool-order", client)
            )
            order = rng.permutation(len(next(iter(pool.values()))))
            pool = {k: v[order] for k, v in pool.items()}
        return pool

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if stage != STATS:
            return super().aggregate(stage, rnd, replies)
        accepted = 0
        rejected = 0
        for cid in sorted(replies):
            stats = replies[cid].arrays.get(STATS, {})
            problem = self.check_upload(stats)
            if problem:
                rejected += 1
                log.warning(
                    "round %d: rejected statistics of client %s: %s", rnd, cid, problem
                )
                self.pools.pop(cid, None)
                continue
            self.pools[cid] = {k: v.astype(np.float32) for k, v in stats.items()}
            accepted += 1
        entries = sum(len(next(iter(p.values()))) for p in self.pools.values() if p)
        return {"accepted": accepted, "rejected": rejected, "pool_entries": entries}

    def check_upload(self, stats: ArrayDict) -> str:
        """Why an upload is unusable ('' if it is fine)."""
        if not stats:
            return "no statistics in the reply"
        shapes = self.shapes
        if set(stats) != set(shapes):
            return f"keys {sorted(stats)} != expected {sorted(shapes)}"
        for k, v in stats.items():
            if v.ndim != 3 or tuple(v.shape[1:]) != shapes[k]:
                return f"{k} has shape {v.shape}, expected (n, *{shapes[k]})"
            if v.dtype.kind not in "fiu":
                return f"{k} has dtype {v.dtype}, expected numbers"
            if not np.isfinite(v).all():
                return f"{k} holds NaN or infinite values"
        lengths = {len(v) for v in stats.values()}
        if len(lengths) > 1:
            return f"arrays have different numbers of entries {sorted(lengths)}"
        return ""

    def state(self) -> Payload:
        out = super().state()
        for cid, pool in self.pools.items():
            out.arrays[f"{POOL}/{cid}"] = pool
        return out

    def load_state(self, state: Payload) -> None:
        super().load_state(state)
        prefix = f"{POOL}/"
        self.pools = {
            g[len(prefix) :]: dict(arrs)
            for g, arrs in state.arrays.items()
            if g.startswith(prefix)
        }


def audit_payload(
    payload: Payload, image_size: int, allowed: Sequence[str] = (WEIGHTS,)
) -> None:
    """Raise if a payload carries anything image-shaped outside ``allowed`` groups.

    An array is image-shaped if two of its trailing dimensions are at least a
    quarter of the image size (a downsampled image is still an image), or if it has
    as many values per entry as a thumbnail of 16 x 16 x 3.
    """
    limit = max(4, image_size // 4)
    for group, arrays in payload.arrays.items():
        if group in allowed:
            continue
        for key, arr in arrays.items():
            spatial = [d for d in arr.shape[1:] if d >= limit]
            per_entry = arr[0].size if arr.ndim >= 2 and len(arr) else arr.size
            if len(spatial) >= 2 or per_entry >= 16 * 16 * 3:
                raise AssertionError(
                    f"payload group {group!r} array {key!r} of shape {arr.shape} "
                    "looks like image data"
                )
