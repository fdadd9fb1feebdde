"""FedHE (FedHD's baseline): the server's class means and the prototype term."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from fedpath.algorithms.fedhe import FedHEClient, proto_term, server_mean
from fedpath.data.bags import split_bags
from fedpath.params.mil_baselines import FedHEParams
from fedpath.types import ClientState, Payload
from tests.mil_helpers import inprocess_run, tiny_baseline


def test_fedhe_server_mean_is_unweighted_over_clients_that_saw_the_class() -> None:
    a = {"logits": np.array([[1.0, -1.0], [0.0, 0.0]]), "count": np.array([5, 0])}
    b = {"logits": np.array([[3.0, 1.0], [2.0, 4.0]]), "count": np.array([1, 2])}
    out = server_mean([a, b])
    # class 0: both clients, NOT weighted by their 5 vs 1 bags; class 1: b only
    assert np.allclose(out["logits"], [[2.0, 0.0], [2.0, 4.0]])
    assert out["count"].tolist() == [2, 1]


def test_fedhe_proto_term_is_mse_to_the_class_mean() -> None:
    glob = {"logits": np.array([[1.0, 2.0], [0.0, 0.0]]), "count": np.array([1, 0])}
    logits = torch.tensor([[0.0, 5.0]], requires_grad=True)
    value = proto_term(logits, 0, glob)
    assert math.isclose(float(value.detach()), ((0 - 1) ** 2 + (5 - 2) ** 2) / 2)
    value.backward()
    assert torch.allclose(logits.grad, torch.tensor([[-1.0, 3.0]]))  # type: ignore[arg-type]
    assert float(proto_term(logits, 1, glob)) == 0.0  # class nowhere: no term
    assert float(proto_term(logits, 0, None)) == 0.0  # round 1


def test_fedhe_uploads_the_last_epochs_mean_logits(tmp_path: Path) -> None:
    run = inprocess_run(
        tiny_baseline(tmp_path, "fedhe", "train.local_epochs=3"), tmp_path
    )
    ctx = run.client_half("hospital_0/c0", 1).ctx
    assert isinstance(run.run_ctx.params, FedHEParams)
    reply = FedHEClient(run.run_ctx.params, ctx).handle("fit", Payload(), ClientState())
    labels = np.array([b.label for b in split_bags(ctx.data)])
    up = reply.arrays["class_logits"]
    # one epoch's bags per class, not the three epochs'
    assert up["count"].tolist() == np.bincount(labels, minlength=2).tolist()
    assert up["logits"].shape == (2, 2) and np.isfinite(up["logits"]).all()
