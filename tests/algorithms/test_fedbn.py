"""FedBN (fedpath.algorithms.fedbn): normalization layers, chosen by module type,
stay at the client; the broadcast carries every other entry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from torch import nn

from fedpath.algorithms.fedbn import FedBNClient, FedBNServer
from fedpath.algorithms.names import FIT, LOCAL, WEIGHTS
from fedpath.config import load_config
from fedpath.types import ClientState, Payload
from tests.algorithms.halves import Halves, halves, nudged
from tests.conftest import tiny_overrides

NORMS = (nn.BatchNorm2d, nn.BatchNorm1d, nn.GroupNorm, nn.LayerNorm)


@pytest.fixture
def fedbn(tmp_path: Path) -> Halves:
    return halves(load_config(None, tiny_overrides(tmp_path, "algorithm.name=fedbn")))


def norm_entries(model: nn.Module) -> set[str]:
    """Every state_dict entry of a normalization module, found by walking the
    modules (independently of the name)."""
    return {
        f"{name}.{k}"
        for name, m in model.named_modules()
        if isinstance(m, NORMS)
        for k in m.state_dict()
    }


def test_local_keys_are_every_normalization_entry(fedbn: Halves) -> None:
    client = fedbn.client()
    assert isinstance(client, FedBNClient)
    model = client.ctx.build_model()
    keys = client.local_keys(model)
    assert keys == norm_entries(model)
    # weights, biases and running statistics of each BatchNorm
    assert any(k.endswith("running_mean") for k in keys)
    assert any(k.endswith("num_batches_tracked") for k in keys)
    assert not any(k.startswith("classifier.") for k in keys)


def test_broadcast_leaves_out_normalization_and_aggregation_keeps_it(
    fedbn: Halves,
) -> None:
    server = fedbn.server(["a", "b"])
    assert isinstance(server, FedBNServer)
    model = fedbn.run.task.build_model()
    norms = norm_entries(model)
    sent = server.configure(FIT, 1, ["a", "b"])["a"].group(WEIGHTS)
    assert set(sent) == set(model.state_dict()) - norms
    # the server still averages the clients' norms (for an unseen hospital)
    init = server.weights
    ups = {c: nudged(init, 0.1, i) for i, c in enumerate(("a", "b"))}
    server.aggregate(
        FIT,
        1,
        {c: Payload({WEIGHTS: w}, {"num_examples": 1}) for c, w in ups.items()},
    )
    k = next(k for k in sorted(norms) if k.endswith(".weight"))
    np.testing.assert_allclose(
        server.weights[k], (ups["a"][k] + ups["b"][k]) / 2, rtol=1e-6
    )


def test_each_client_keeps_its_own_normalization_across_rounds(
    fedbn: Halves,
) -> None:
    server = fedbn.server(["c0"])
    state = ClientState()
    msg = server.configure(FIT, 1, ["c0"])["c0"]
    reply = fedbn.client().handle(FIT, msg, state)
    norms = norm_entries(fedbn.run.task.build_model())
    kept = state.arrays[LOCAL]
    assert set(kept) == norms
    # uploaded too: only the broadcast leaves them out
    for k in norms:
        np.testing.assert_array_equal(reply.group(WEIGHTS)[k], kept[k])
    # round 2: the model starts from this client's norms, whatever the server holds
    client = fedbn.client(round=2)
    model = client.ctx.build_model()
    client.load(model, server.configure(FIT, 2, ["c0"])["c0"].group(WEIGHTS), state)
    for k in norms:
        np.testing.assert_array_equal(model.state_dict()[k].numpy(), kept[k])
