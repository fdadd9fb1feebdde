"""FedAvg and FedProx on one MIL architecture: the client trains the global
weights on its real slides; FedProx's proximal term pulls them back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpath.algorithms.base import ProtocolError
from fedpath.algorithms.fedavg_mil import FedAvgMILClient
from fedpath.types import ArrayDict, ClientState, Payload
from tests.mil_helpers import inprocess_run, tiny


def _client(tmp_path: Path, *extra: str) -> tuple[FedAvgMILClient, ArrayDict]:
    """The first client of a tiny run, and the run's initial global weights."""
    run = inprocess_run(tiny(tmp_path, *extra), tmp_path)
    ctx = run.client_half(run.server.ctx.client_ids[0], 1).ctx
    start = run.server.global_weights()
    assert start is not None
    return FedAvgMILClient(run.run_ctx.params, ctx), start


def _fit(tmp_path: Path, *extra: str) -> tuple[ArrayDict, ArrayDict, Payload]:
    client, start = _client(tmp_path, *extra)
    reply = client.handle("fit", Payload({"weights": start}), ClientState())
    return start, reply.group("weights"), reply


def distance(a: ArrayDict, b: ArrayDict) -> float:
    return sum(float(np.square(a[k] - b[k]).sum()) for k in a)


def test_the_client_trains_the_global_weights_and_uploads_them(
    tmp_path: Path,
) -> None:
    start, trained, reply = _fit(tmp_path, "algorithm.name=fedavg_mil")
    assert trained.keys() == start.keys() and distance(start, trained) > 0
    assert int(reply.scalars["num_examples"]) > 0
    client, _ = _client(tmp_path / "x", "algorithm.name=fedavg_mil")
    with pytest.raises(ProtocolError, match="has no stage 'distill'"):
        client.handle("distill", Payload(), ClientState())


def test_fedprox_stays_closer_to_the_global_weights(tmp_path: Path) -> None:
    start, plain, _ = _fit(tmp_path / "a", "algorithm.name=fedavg_mil")
    _, prox, _ = _fit(
        tmp_path / "b", "algorithm.name=fedprox_mil", "algorithm.params.mu=100.0"
    )
    assert distance(start, prox) < distance(start, plain)
