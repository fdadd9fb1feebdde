"""FedProx (fedpath.algorithms.fedprox): L = CE + (mu/2)||w - w_g||^2, with the
proximal term computed by hand over the trainable parameters."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.algorithms.base import ALGORITHMS
from fedpath.algorithms.fedavg import FedAvgServer
from fedpath.algorithms.fedprox import FedProxClient
from fedpath.config import load_config
from fedpath.types import ClientState, Payload
from tests.algorithms.halves import Halves, halves
from tests.conftest import tiny_overrides


def prox_halves(tmp_path: Path, mu: float) -> Halves:
    over = ["algorithm.name=fedprox", f"algorithm.params.mu={mu}"]
    return halves(load_config(None, tiny_overrides(tmp_path, *over)))


def anchored_and_moved(
    client: FedProxClient,
) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    """A model anchored at its start, then moved by a known amount."""
    model = client.ctx.build_model()
    client.begin(model, Payload(), ClientState())
    start = [p.detach().clone() for p in model.parameters()]
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return model, start


def batch(h: Halves) -> tuple[torch.Tensor, torch.Tensor]:
    data = h.data()
    x = data.load(np.arange(8)).float() / 255
    return x, torch.from_numpy(data.labels[:8]).long()


def test_loss_is_ce_plus_half_mu_squared_distance(tmp_path: Path) -> None:
    h = prox_halves(tmp_path, 0.3)
    client = h.client()
    assert isinstance(client, FedProxClient)
    model, start = anchored_and_moved(client)
    x, y = batch(h)
    out = client.loss(model, x, y)
    dist = sum(
        float(((p.detach().double() - s.double()) ** 2).sum())
        for p, s in zip(model.parameters(), start, strict=True)
    )
    ce = float(torch.nn.functional.cross_entropy(model(x), y).detach())
    assert float(out["prox"]) == pytest.approx(dist, rel=1e-5)
    assert float(out["ce"]) == pytest.approx(ce, rel=1e-5)
    assert float(out["loss"].detach()) == pytest.approx(ce + 0.3 / 2 * dist, rel=1e-5)


def test_gradient_of_the_term_is_mu_times_the_drift(tmp_path: Path) -> None:
    h = prox_halves(tmp_path, 2.0)
    client = h.client()
    model, start = anchored_and_moved(client)
    model.eval()  # the same forward pass twice (no BatchNorm batch statistics)
    x, y = batch(h)
    client.loss(model, x, y)["loss"].backward()
    total = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    for p, s, g in zip(model.parameters(), start, total, strict=True):
        assert p.grad is not None
        torch.testing.assert_close(g - p.grad, 2.0 * (p.detach() - s))


def test_mu_zero_is_plain_cross_entropy_and_the_server_is_fedavg(
    tmp_path: Path,
) -> None:
    h = prox_halves(tmp_path, 0.0)
    client = h.client()
    model, _ = anchored_and_moved(client)
    out = client.loss(model, *batch(h))
    assert float(out["prox"]) > 0  # moved from the anchor, but not penalised
    assert float(out["loss"].detach()) == pytest.approx(float(out["ce"]))
    assert ALGORITHMS.get("fedprox").server is FedAvgServer
