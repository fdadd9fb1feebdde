"""FedDis, adapted (fedpath.algorithms.feddis): the invariant head is aggregated,
the appearance head and the decoder stay local; the loss is NT-Xent on the
invariant codes plus the reconstruction of the pooled views, by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedpath.algorithms.feddis import FedDisClient
from fedpath.algorithms.names import FIT, LOCAL_HEADS, SHARED, WEIGHTS
from fedpath.algorithms.ssl_common import SSLNet
from fedpath.losses import nt_xent
from fedpath.types import ClientState
from tests.algorithms.halves import Halves, halves
from tests.ssl_helpers import ssl_cfg

PARAMS = ["proj_dim=8", "recon_size=4", "recon_weight=0.6", "temperature=0.4"]


@pytest.fixture
def feddis(tmp_path: Path) -> Halves:
    over = [f"algorithm.params.{p}" for p in PARAMS]
    return halves(ssl_cfg(tmp_path, "feddis", *over))


def test_loss_is_nt_xent_plus_weighted_reconstruction(feddis: Halves) -> None:
    client = feddis.client()
    assert isinstance(client, FedDisClient)
    model = client.ctx.task.images().build_model()
    d = model.feature_dim
    local = nn.ModuleDict(client.build_local(client.params, d))
    assert local["dec"].in_features == 16 and local["dec"].out_features == 3 * 4 * 4
    net = SSLNet(model, nn.ModuleDict(client.build_shared(client.params, d)), local)
    net.eval()  # each view alone gives the same rows
    a, b = torch.rand((2, 4, 3, 16, 16), generator=torch.Generator().manual_seed(0))
    out = client.ssl_loss(net, a, b, a)
    with torch.no_grad():
        rec, zs = [], []
        for v in (a, b):
            h = net.encode(v)
            z_inv, z_spec = net.shared["inv"](h), net.local["spec"](h)
            zs.append(z_inv)
            recon = net.local["dec"](torch.cat([z_inv, z_spec], 1)).view(-1, 3, 4, 4)
            # 16 px -> 4 px: the mean of each 4 x 4 block
            target = v.view(4, 3, 4, 4, 4, 4).mean((3, 5))
            rec.append(F.mse_loss(recon, target))
        cl = nt_xent(zs[0], zs[1], 0.4)
    recon_loss = 0.5 * (rec[0] + rec[1])  # both views have as many pixels
    torch.testing.assert_close(out["cl"], cl)
    torch.testing.assert_close(out["recon"], recon_loss)
    torch.testing.assert_close(out["loss"].detach(), cl + 0.6 * recon_loss)


def test_the_appearance_part_never_leaves_the_client(feddis: Halves) -> None:
    msg = feddis.server(["c0"]).configure(FIT, 1, ["c0"])["c0"]
    assert {k.split(".")[0] for k in msg.group(SHARED)} == {"inv"}
    state = ClientState()
    reply = feddis.client().handle(FIT, msg, state)
    assert set(reply.arrays) == {WEIGHTS, SHARED}
    assert {k.split(".")[0] for k in reply.group(SHARED)} == {"inv"}
    assert all(k.startswith("encoder.") for k in reply.group(WEIGHTS))
    kept = state.arrays[LOCAL_HEADS]
    assert {k.split(".")[0] for k in kept} == {"spec", "dec"}
    # the next round starts from the kept heads and trains them further
    feddis.client(round=2).handle(FIT, msg, state)
    assert any(not np.array_equal(kept[k], state.arrays[LOCAL_HEADS][k]) for k in kept)
