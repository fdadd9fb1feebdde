"""FedProx-SSL (fedpath.algorithms.fedprox_ssl): NT-Xent + (mu/2)||w - w_g||^2 over
the encoder and the projection head, the distance computed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from fedpath.algorithms.fedprox_ssl import FedProxSSLClient
from fedpath.algorithms.ssl_common import SSLNet
from fedpath.types import ClientState, Payload
from tests.algorithms.halves import halves
from tests.ssl_helpers import ssl_cfg


def test_loss_adds_half_mu_squared_drift_of_encoder_and_head(tmp_path: Path) -> None:
    over = ["algorithm.params.mu=0.4", "algorithm.params.proj_dim=8"]
    client = halves(ssl_cfg(tmp_path, "fedprox_ssl", *over)).client()
    assert isinstance(client, FedProxSSLClient)
    model = client.ctx.task.images().build_model()
    shared = nn.ModuleDict(client.build_shared(client.params, model.feature_dim))
    net = SSLNet(model, shared, nn.ModuleDict())
    client.begin(net, Payload(), ClientState())
    start = {k: v.detach().clone() for k, v in net.named_parameters()}
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    anchored = [k for k in start if k.startswith(("model.encoder.", "shared."))]
    assert any(k.startswith("shared.proj.") for k in anchored)
    dist = sum(
        float(((p.detach().double() - start[k].double()) ** 2).sum())
        for k, p in net.named_parameters()
        if k in anchored
    )
    a, b = torch.rand((2, 4, 3, 16, 16), generator=gen)
    out = client.ssl_loss(net, a, b, a)
    assert float(out["prox"]) == pytest.approx(dist, rel=1e-5)
    expected = float(out["cl"]) + 0.4 / 2 * dist
    assert float(out["loss"].detach()) == pytest.approx(expected, rel=1e-5)
    # the classifier is neither trained nor sent: it is not anchored
    with torch.no_grad():
        net.model.classifier.weight.add_(10.0)
    again = client.ssl_loss(net, a, b, a)
    assert float(again["prox"]) == pytest.approx(dist, rel=1e-5)
