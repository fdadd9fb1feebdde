"""Pooled MIL training (the upper bound): clients upload their real slides once,
the coordinator trains one model on all of them and checkpoints it with them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpath.algorithms.base import ProtocolError
from fedpath.algorithms.pooled_mil import PooledMILClient, PooledMILServer
from fedpath.config import ConfigError
from fedpath.data.bags import split_bags
from fedpath.types import ClientState, Payload
from tests.mil_helpers import inprocess_run, tiny


def test_clients_upload_real_slides_once_then_idle(tmp_path: Path) -> None:
    run = inprocess_run(tiny(tmp_path, "algorithm.name=pooled_mil"), tmp_path)
    ctx = run.client_half(run.server.ctx.client_ids[0], 1).ctx
    client = PooledMILClient(run.run_ctx.params, ctx)
    up = client.handle("upload", Payload(), ClientState())
    real = split_bags(ctx.data)
    assert up.arrays["real_slides"]["sizes"].tolist() == [b.num_patches for b in real]
    assert up.scalars == {"num_examples": len(real)}
    idle = client.handle("fit", Payload(), ClientState())
    assert idle.arrays == {} and idle.scalars == {"num_examples": len(real)}
    with pytest.raises(ProtocolError, match="pooled_mil has no stage 'distill'"):
        client.handle("distill", Payload(), ClientState())


def test_the_server_trains_on_all_slides_and_resumes_from_its_state(
    tmp_path: Path,
) -> None:
    run = inprocess_run(
        tiny(tmp_path, "algorithm.name=pooled_mil", "train.rounds=2"), tmp_path
    )
    server = run.server
    assert isinstance(server, PooledMILServer)
    assert tuple(server.stages(1)) == ("upload",) and tuple(server.stages(2)) == (
        "fit",
    )
    run.run()
    n = sum(len(split_bags(c.train)) for c in run.clients if c.train is not None)
    assert len(server.slides) == n
    again = PooledMILServer(run.run_ctx.params, server.ctx)
    again.load_state(server.state())
    assert len(again.slides) == n
    for k, v in server.global_weights().items():
        assert np.array_equal(again.global_weights()[k], v)


def test_one_model_only(tmp_path: Path) -> None:
    run = inprocess_run(tiny(tmp_path, "algorithm.name=pooled_mil"), tmp_path)
    params = type(run.run_ctx.params)(models={"hospital_0": "transmil"})
    with pytest.raises(ConfigError, match="pooled training has one model"):
        PooledMILServer(params, run.server.ctx)
