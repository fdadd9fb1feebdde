"""FedAvg (fedpath.algorithms.fedavg): the weight-averaging client and the
example-weighted server, checked against sums computed by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from torch import nn

from fedpath.algorithms.base import ProtocolError
from fedpath.algorithms.fedavg import FedAvgClient, FedAvgServer, WeightsClient
from fedpath.algorithms.names import FIT, LOCAL, WEIGHTS
from fedpath.config import load_config
from fedpath.types import ClientState, Payload
from tests.algorithms.halves import Halves, halves, nudged
from tests.conftest import tiny_overrides


@pytest.fixture
def fedavg(tmp_path: Path) -> Halves:
    return halves(load_config(None, tiny_overrides(tmp_path, "algorithm.name=fedavg")))


def test_server_averages_weighted_by_examples(fedavg: Halves) -> None:
    server = fedavg.server(["a", "b", "c"])
    assert isinstance(server, FedAvgServer)
    init = server.weights
    counts = {"c": 30, "a": 10, "b": 20}  # replies in any order
    uploads = {c: nudged(init, 0.1, i) for i, c in enumerate(counts)}
    replies = {
        c: Payload({WEIGHTS: uploads[c]}, {"num_examples": n, "loss": float(n)})
        for c, n in counts.items()
    }
    logs = server.aggregate(FIT, 1, replies)
    new = server.weights
    for k, v in init.items():
        if v.dtype.kind != "f":
            continue
        by_hand = sum(counts[c] * uploads[c][k].astype(np.float64) for c in counts)
        np.testing.assert_allclose(new[k], by_hand / 60, rtol=1e-5, atol=1e-6)
    # the scalars are example-weighted too
    assert logs["loss"] == pytest.approx((10 * 10 + 20 * 20 + 30 * 30) / 60)


def test_server_broadcasts_its_weights_and_refuses_other_stages(
    fedavg: Halves,
) -> None:
    server = fedavg.server(["a", "b"])
    msgs = server.configure(FIT, 3, ["a", "b"])
    assert set(msgs) == {"a", "b"}
    assert msgs["a"].scalars == {"round": 3}
    assert msgs["a"].group(WEIGHTS) is server.global_weights()
    with pytest.raises(ProtocolError, match="no stage 'stats'"):
        server.configure("stats", 1, ["a"])
    with pytest.raises(ProtocolError, match="no client replied"):
        server.aggregate(FIT, 1, {})


def test_server_state_round_trips(fedavg: Halves) -> None:
    server = fedavg.server(["a"])
    server.load_state(Payload({WEIGHTS: nudged(server.global_weights(), 1.0, 0)}))
    twin = fedavg.server(["a"])
    twin.load_state(server.state())
    for k, v in server.global_weights().items():
        np.testing.assert_array_equal(twin.global_weights()[k], v)


def test_client_trains_and_uploads_every_entry_with_its_example_count(
    fedavg: Halves,
) -> None:
    client = fedavg.client()
    assert isinstance(client, FedAvgClient)
    sent = fedavg.initial_weights()
    state = ClientState()
    reply = client.handle(FIT, Payload({WEIGHTS: sent}, {"round": 1}), state)
    assert set(reply.group(WEIGHTS)) == set(sent)
    assert reply.scalars["num_examples"] == len(fedavg.data())
    assert not state.arrays  # FedAvg keeps nothing between rounds
    changed = [k for k in sent if not np.array_equal(sent[k], reply.group(WEIGHTS)[k])]
    assert any(k.endswith(".weight") for k in changed)
    with pytest.raises(ProtocolError, match="no stage"):
        client.handle("stats", Payload(), state)


class _PrivateHead(WeightsClient):
    """Keeps the classifier at the client (never uploaded)."""

    def private_keys(self, model: nn.Module) -> set[str]:
        return {k for k in model.state_dict() if k.startswith("classifier.")}


def test_private_entries_stay_in_the_state_and_local_entries_win_on_load(
    fedavg: Halves,
) -> None:
    base = fedavg.client()
    client = _PrivateHead(base.params, base.ctx)
    sent = fedavg.initial_weights()
    state = ClientState()
    reply = client.handle(FIT, Payload({WEIGHTS: sent}), state)
    assert not any(k.startswith("classifier.") for k in reply.group(WEIGHTS))
    kept = state.arrays[LOCAL]
    assert set(kept) == {"classifier.weight", "classifier.bias"}
    # next round: the broadcast classifier is replaced by the client's own
    model = base.ctx.build_model()
    client.load(model, nudged(sent, 1.0, 1), state)
    for k, v in kept.items():
        np.testing.assert_array_equal(model.state_dict()[k].numpy(), v)


def test_a_broadcast_entry_the_model_lacks_is_a_protocol_error(
    fedavg: Halves,
) -> None:
    client = fedavg.client(client_id="h7")
    weights = {**fedavg.initial_weights(), "ghost.weight": np.zeros(2, np.float32)}
    with pytest.raises(ProtocolError, match="h7.*ghost.weight"):
        client.load(client.ctx.build_model(), weights, ClientState())
