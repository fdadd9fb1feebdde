"""FedAvg-SSL (fedpath.algorithms.fedavg_ssl): federated SimCLR whose projection
head is aggregated with the encoder; NT-Xent of the two views by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fedpath.algorithms.fedavg_ssl import SimCLRClient
from fedpath.algorithms.names import FIT, SHARED, WEIGHTS
from fedpath.algorithms.ssl_common import SSLNet
from fedpath.losses import nt_xent
from fedpath.types import ClientState
from tests.algorithms.halves import Halves, halves
from tests.ssl_helpers import ssl_cfg


@pytest.fixture
def simclr(tmp_path: Path) -> Halves:
    return halves(ssl_cfg(tmp_path, "fedavg_ssl", "algorithm.params.proj_dim=16"))


def ssl_net(client: SimCLRClient) -> SSLNet:
    model = client.ctx.task.images().build_model()
    shared = nn.ModuleDict(client.build_shared(client.params, model.feature_dim))
    return SSLNet(model, shared, nn.ModuleDict())


def test_loss_is_nt_xent_of_the_projected_views(simclr: Halves) -> None:
    client = simclr.client()
    assert isinstance(client, SimCLRClient)
    net = ssl_net(client).eval()  # each view alone gives the same rows
    gen = torch.Generator().manual_seed(0)
    a, b = torch.rand((2, 4, 3, 16, 16), generator=gen)
    cl, h, z = client.simclr(net, a, b)
    assert h.shape == (8, net.model.feature_dim) and z.shape == (8, 16)
    with torch.no_grad():
        za = net.shared["proj"](net.encode(a))
        zb = net.shared["proj"](net.encode(b))
    t = client.params.temperature
    torch.testing.assert_close(cl.detach(), nt_xent(za, zb, t))
    out = client.ssl_loss(net, a, b, a)
    torch.testing.assert_close(out["loss"].detach(), out["cl"])
    torch.testing.assert_close(out["cl"], nt_xent(za, zb, t))


def test_the_encoder_and_projection_head_travel_nothing_stays(
    simclr: Halves,
) -> None:
    msg = simclr.server(["c0"]).configure(FIT, 1, ["c0"])["c0"]
    state = ClientState()
    reply = simclr.client().handle(FIT, msg, state)
    assert set(reply.arrays) == {WEIGHTS, SHARED}
    assert all(k.startswith("encoder.") for k in reply.group(WEIGHTS))
    assert reply.group(SHARED) and all(
        k.startswith("proj.") for k in reply.group(SHARED)
    )
    assert not state.arrays  # no local heads, no previous model
    assert reply.scalars["num_examples"] == len(simclr.data())
    assert any(
        not np.array_equal(v, msg.group(SHARED)[k])
        for k, v in reply.group(SHARED).items()
    )
