"""The halves shared by the self-supervised methods (fedpath.algorithms.ssl_common):
what is uploaded and loaded, frozen teachers, the pair check, and the server's
example-weighted average of the encoder and the shared heads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.algorithms.base import ProtocolError
from fedpath.algorithms.fedavg_ssl import SimCLRServer
from fedpath.algorithms.names import FIT, SHARED, WEIGHTS
from fedpath.algorithms.ssl_common import (
    SSLClient,
    encoder_entries,
    frozen_copy,
    load_entries,
)
from fedpath.config import ConfigError
from fedpath.data.partition import lodo_plan
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.inprocess import InProcessRun
from fedpath.types import ClientState, Payload
from tests.algorithms.halves import Halves, halves, nudged
from tests.ssl_helpers import ssl_cfg

SSL_METHODS = [
    "fedad",
    "fedavg_ssl",
    "fedprox_ssl",
    "moon",
    "feddis",
    "elcfs",
    "central_simclr",
    "central_supervised",
]


@pytest.fixture
def simclr(tmp_path: Path) -> Halves:
    return halves(ssl_cfg(tmp_path, "fedavg_ssl"))


def test_encoder_entries_and_load_entries(simclr: Halves) -> None:
    model = simclr.run.task.build_model()
    entries = encoder_entries(model)
    state = model.state_dict()
    assert set(entries) == {k for k in state if k.startswith("encoder.")}
    assert "classifier.weight" not in entries
    for k, v in entries.items():
        np.testing.assert_array_equal(v, state[k].numpy())
    moved = nudged(entries, 1.0, 0)
    load_entries(model, moved, "test")
    k = next(k for k in moved if k.endswith(".weight"))
    np.testing.assert_array_equal(model.state_dict()[k].numpy(), moved[k])
    with pytest.raises(ProtocolError, match="client x: entries the model lacks"):
        load_entries(model, {"head.w": np.zeros(1, np.float32)}, "client x")


def test_frozen_copy_is_an_independent_teacher(simclr: Halves) -> None:
    model = simclr.run.task.build_model().train()
    twin = frozen_copy(model)
    assert not twin.training
    assert not any(p.requires_grad for p in twin.parameters())
    assert all(p.requires_grad for p in model.parameters())
    with torch.no_grad():
        next(twin.parameters()).add_(1.0)
    assert not torch.equal(next(twin.parameters()), next(model.parameters()))


def test_joint_stacks_view_a_above_view_b() -> None:
    a, b = torch.zeros(3, 2), torch.ones(3, 2)
    n, both = SSLClient.joint(a, b)
    assert n == 3 and torch.equal(both[:3], a) and torch.equal(both[3:], b)


def test_contrastive_pairs_need_batches_of_two(tmp_path: Path) -> None:
    h = halves(ssl_cfg(tmp_path, "fedavg_ssl", "train.batch_size=1"))
    with pytest.raises(ConfigError, match="'train.batch_size': client h3"):
        h.client("h3").handle(FIT, Payload(), ClientState())
    with pytest.raises(ProtocolError, match="no stage 'stats'"):
        h.client().handle("stats", Payload(), ClientState())


def test_server_averages_encoder_and_shared_heads_by_examples(
    simclr: Halves,
) -> None:
    server = simclr.server(["a", "b"])
    assert isinstance(server, SimCLRServer)
    init = simclr.initial_weights()
    assert set(server.global_weights()) == {k for k in init if k.startswith("encoder.")}
    assert server.param_keys and not any("running" in k for k in server.param_keys)
    msg = server.configure(FIT, 2, ["a", "b"])["a"]
    assert set(msg.arrays) == {WEIGHTS, SHARED} and msg.scalars == {"round": 2}
    assert all(k.startswith("proj.") for k in msg.arrays[SHARED])
    ups = {
        c: Payload(
            {
                WEIGHTS: nudged(server.weights, 0.1, i),
                SHARED: nudged(server.shared, 0.1, 10 + i),
            },
            {"num_examples": n},
        )
        for i, (c, n) in enumerate((("a", 1), ("b", 3)))
    }
    server.aggregate(FIT, 2, ups)
    for group, now in ((WEIGHTS, server.weights), (SHARED, server.shared)):
        k = next(k for k in now if k.endswith(".weight"))
        by_hand = (ups["a"].group(group)[k] + 3 * ups["b"].group(group)[k]) / 4
        np.testing.assert_allclose(now[k], by_hand, rtol=1e-5, atol=1e-7)
    twin = simclr.server(["a", "b"])
    twin.load_state(server.state())
    np.testing.assert_array_equal(twin.shared[k], server.shared[k])
    with pytest.raises(ProtocolError, match="no client replied"):
        server.aggregate(FIT, 3, {})


def test_labels_are_never_read(simclr: Halves) -> None:
    server = simclr.server(["c0"])
    msg = server.configure(FIT, 1, ["c0"])["c0"]
    data = simclr.data()
    relabelled = data.subset(np.arange(len(data)))
    relabelled.labels[:] = 1 - relabelled.labels
    a = simclr.client().handle(FIT, msg, ClientState())
    b = simclr.client(data=relabelled).handle(FIT, msg, ClientState())
    for k, v in a.group(WEIGHTS).items():
        np.testing.assert_array_equal(v, b.group(WEIGHTS)[k])


@pytest.mark.parametrize("algorithm", SSL_METHODS)
def test_one_round_changes_the_encoder(tmp_path: Path, algorithm: str) -> None:
    cfg = ssl_cfg(tmp_path, algorithm)
    ds = load_dataset(cfg.data)
    run = InProcessRun(cfg, ds, lodo_plan(ds, ["hospital_2"])[0], 0, tmp_path / "r")
    initial = run.server.global_weights()
    assert initial is not None
    before = {k: v.copy() for k, v in initial.items()}
    run.run()
    after = run.server.global_weights()
    assert after is not None
    assert set(after) == set(before)
    sent = (
        ("encoder.", "classifier.") if algorithm == "central_supervised" else "encoder."
    )
    assert all(k.startswith(sent) for k in after)
    changed = [k for k in before if not np.array_equal(before[k], after[k])]
    assert any(".weight" in k for k in changed)
    assert all(np.isfinite(v).all() for v in after.values())
