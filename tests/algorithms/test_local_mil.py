"""Local-only MIL training: nothing crosses the network; each client keeps its own
model; the coordinator only starts rounds and logs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedpath.algorithms.base import ProtocolError
from fedpath.algorithms.local_mil import LocalMILClient, NoServer
from fedpath.types import ClientState, Payload
from tests.mil_helpers import inprocess_run, tiny


def test_the_coordinator_only_starts_rounds_and_averages_scalars(
    tmp_path: Path,
) -> None:
    run = inprocess_run(tiny(tmp_path, "algorithm.name=local_mil"), tmp_path)
    server = NoServer(run.run_ctx.params, run.server.ctx)
    sent = server.configure("fit", 4, ["a", "b"])
    assert all(p.arrays == {} and p.scalars == {"round": 4} for p in sent.values())
    replies = {
        "a": Payload({}, {"num_examples": 1, "loss": 2.0}),
        "b": Payload({}, {"num_examples": 3, "loss": 6.0}),
    }
    assert server.aggregate("fit", 4, replies)["loss"] == pytest.approx(5.0)
    assert server.state() == Payload() and server.global_weights() is None
    ctx = run.client_half(run.server.ctx.client_ids[0], 1).ctx
    with pytest.raises(ProtocolError, match="local_mil has no stage 'distill'"):
        LocalMILClient(run.run_ctx.params, ctx).handle(
            "distill", Payload(), ClientState()
        )


def test_each_client_trains_its_own_model_and_sends_nothing(tmp_path: Path) -> None:
    run = inprocess_run(
        tiny(tmp_path, "algorithm.name=local_mil", "train.rounds=2"), tmp_path
    )
    run.run()
    models = [s.arrays["model"] for s in run.states.values()]
    assert len(models) == 3
    key = next(iter(models[0]))
    assert not np.array_equal(models[0][key], models[1][key])  # own data, own model
    for line in (run.run_dir / "traffic.jsonl").open():
        assert not json.loads(line)["sent"]
