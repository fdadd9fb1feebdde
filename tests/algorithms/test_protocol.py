"""The algorithm interface carries non-weight payloads, per-client broadcasts,
private modules and server state across rounds without runtime special cases.

A toy algorithm exercises each: a ``stats`` stage in round 1 only (a one-shot
exchange), a pool that excludes the receiver's own entries, a classifier that never
leaves the client, and a server-side counter that must survive a resume.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch import nn

from fedpath.algorithms.aggregation import weighted_average
from fedpath.algorithms.base import (
    ALGORITHMS,
    ServerAlgorithm,
    ServerContext,
    register_algorithm,
)
from fedpath.algorithms.fedavg import WeightsClient
from fedpath.config import load_config
from fedpath.runtime.experiment import run_experiment
from fedpath.runtime.inprocess import InProcessRun
from fedpath.types import ClientState, Payload, Scalar
from fedpath.wire import Wire
from tests.conftest import tiny_overrides

SEEN: dict[str, Any] = {}


class ToyClient(WeightsClient):
    """Uploads per-image channel means in 'stats'; trains with a private classifier."""

    def private_keys(self, model: nn.Module) -> set[str]:
        return {k for k in model.state_dict() if k.startswith("classifier.")}

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage == "stats":
            x = self.ctx.data.load(np.arange(min(4, len(self.ctx.data)))).float()
            return Payload({"stats": {"mean": x.mean(dim=(2, 3)).numpy()}})
        pool = payload.group("pool")
        SEEN.setdefault("pools", {})[(self.ctx.round, self.ctx.client_id)] = set(
            pool["owner"].tolist()
        )
        assert pool["mean"].shape == (len(pool["owner"]), 3)
        SEEN.setdefault("counter", []).append(payload.scalars["counter"])
        return super().handle(stage, payload, state)


class ToyServer(ServerAlgorithm):
    def __init__(self, params: Any, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.weights = dict(ctx.initial_weights)
        self.pool: dict[str, np.ndarray] = {}
        self.counter = 0

    def stages(self, rnd: int) -> Sequence[str]:
        return ("stats", "fit") if rnd == 1 else ("fit",)

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        if stage == "stats":
            return {c: Payload() for c in clients}
        out = {}
        for c in clients:
            keep = self.pool["owner"] != self.ctx.client_ids.index(c)
            pool = {k: v[keep] for k, v in self.pool.items()}
            out[c] = Payload(
                {"weights": self.weights, "pool": pool}, {"counter": self.counter}
            )
        return out

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if stage == "stats":
            # the server knows who sent what; owners are indices into client_ids
            ids = self.ctx.client_ids
            means = [replies[c].group("stats")["mean"] for c in sorted(replies)]
            owner = [
                np.full(len(m), ids.index(c))
                for c, m in zip(sorted(replies), means, strict=True)
            ]
            self.pool = {"mean": np.concatenate(means), "owner": np.concatenate(owner)}
            return {"pool_size": len(self.pool["owner"])}
        states = [replies[c].group("weights") for c in sorted(replies)]
        n = [float(replies[c].scalars["num_examples"]) for c in sorted(replies)]
        self.weights.update(weighted_average(states, n))
        self.counter += 1
        return {}

    def global_weights(self) -> dict[str, np.ndarray]:
        return self.weights

    def state(self) -> Payload:
        return Payload(
            {"weights": self.weights, "pool": self.pool}, {"counter": self.counter}
        )

    def load_state(self, state: Payload) -> None:
        self.weights = dict(state.group("weights"))
        self.pool = dict(state.group("pool"))
        self.counter = int(state.scalars["counter"])


@pytest.fixture
def toy() -> Iterator[str]:
    wire = Wire("per-image channel means", {"stats": "statistics", "fit": "weights"})
    register_algorithm("toy_protocol", ToyClient, ToyServer, wire=wire)
    SEEN.clear()
    yield "toy_protocol"
    ALGORITHMS.unregister("toy_protocol")


def test_pools_private_modules_and_server_state(
    tmp_path: Path, toy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = load_config(
        None,
        tiny_overrides(
            tmp_path,
            f"algorithm.name={toy}",
            "train.rounds=3",
            "lodo.targets=[hospital_0]",
        ),
    )
    uploads: list[Payload] = []
    original = InProcessRun._call_client

    def spy(self: InProcessRun, cid: str, stage: str, rnd: int, p: Payload) -> Payload:
        reply = original(self, cid, stage, rnd, p)
        uploads.append(reply)
        return reply

    monkeypatch.setattr(InProcessRun, "_call_client", spy)
    run_experiment(cfg)
    clients = {"hospital_1/c0", "hospital_1/c1", "hospital_2/c0", "hospital_2/c1"}
    # each client got everyone's statistics except its own, in every round
    ids = sorted(clients)
    for (rnd, cid), owners in SEEN["pools"].items():
        assert {ids[i] for i in owners} == clients - {cid}, (rnd, cid)
    assert {r for r, _ in SEEN["pools"]} == {1, 2, 3}
    # the stats stage ran once (round 1): 4 stats uploads + 3 x 4 weight uploads
    assert sum("stats" in u.arrays for u in uploads) == 4
    # the private classifier never left a client
    for u in uploads:
        for k in u.arrays.get("weights", {}):
            assert not k.startswith("classifier.")
    # server state across rounds
    assert sorted(SEEN["counter"]) == [0] * 4 + [1] * 4 + [2] * 4


def test_server_state_survives_resume(
    tmp_path: Path, toy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = load_config(
        None,
        tiny_overrides(
            tmp_path,
            f"algorithm.name={toy}",
            "train.rounds=3",
            "lodo.targets=[hospital_0]",
        ),
    )
    original = InProcessRun.run_round

    def crash(self: InProcessRun, rnd: int) -> dict:
        if rnd == 3:
            raise KeyboardInterrupt
        return original(self, rnd)

    monkeypatch.setattr(InProcessRun, "run_round", crash)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg)
    monkeypatch.setattr(InProcessRun, "run_round", original)
    SEEN.clear()
    run_experiment(cfg, resume=True)
    # round 3 resumed with the counter and the pool restored from the checkpoint
    assert SEEN["counter"] == [2] * 4
    assert all(len(o) == 3 for o in SEEN["pools"].values())
