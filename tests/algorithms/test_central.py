"""The centralized upper bounds (fedpath.algorithms.central): every client uploads
its images (and, supervised, its labels), the server pools them in client order
and one client trains on the whole pool."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.algorithms.base import ProtocolError
from fedpath.algorithms.central import (
    CentralSimCLRServer,
    CentralSupervisedClient,
    CentralSupervisedServer,
)
from fedpath.algorithms.names import FIT, POOL, UPLOAD, WEIGHTS
from fedpath.algorithms.ssl_common import SSLNet
from fedpath.data.partition import lodo_plan
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.inprocess import InProcessRun
from fedpath.types import ClientState, Payload
from tests.algorithms.halves import Halves, halves
from tests.ssl_helpers import ssl_cfg


def central(tmp_path: Path, name: str) -> Halves:
    return halves(ssl_cfg(tmp_path, name, "algorithm.params.proj_dim=8"))


def uploads(h: Halves) -> dict[str, Payload]:
    domains = {"b": "hospital_1", "a": "hospital_0"}
    return {
        c: h.client(c, d).handle(UPLOAD, Payload({}, {"round": 1}), ClientState())
        for c, d in domains.items()
    }


@pytest.mark.parametrize("name", ["central_simclr", "central_supervised"])
def test_every_image_is_uploaded_labels_only_when_supervised(
    tmp_path: Path, name: str
) -> None:
    h = central(tmp_path, name)
    reply = uploads(h)["a"]
    data = h.data("hospital_0")
    pooled = reply.group(POOL)
    np.testing.assert_array_equal(
        pooled["images"], data.load(np.arange(len(data))).numpy()
    )
    assert reply.scalars["num_images"] == len(data)
    if name == "central_supervised":
        np.testing.assert_array_equal(pooled["labels"], data.labels)
    else:
        assert set(pooled) == {"images"}


def test_server_pools_in_client_order_and_sends_the_pool_to_one_trainer(
    tmp_path: Path,
) -> None:
    h = central(tmp_path, "central_supervised")
    server = h.server(["b", "a"])
    assert isinstance(server, CentralSupervisedServer)
    assert server.stages(1) == (UPLOAD, FIT)
    with pytest.raises(ProtocolError, match="no client uploaded"):
        server.aggregate(UPLOAD, 1, {})
    ups = uploads(h)
    logs = server.aggregate(UPLOAD, 1, ups)
    na, nb = len(h.data("hospital_0")), len(h.data("hospital_1"))
    assert logs == {"pooled_images": na + nb}
    np.testing.assert_array_equal(
        server.pool["images"][:na], ups["a"].group(POOL)["images"]
    )
    np.testing.assert_array_equal(
        server.pool["labels"][na:], ups["b"].group(POOL)["labels"]
    )
    assert server.stages(2) == (FIT,)
    msgs = server.configure(FIT, 2, ["b", "a"])
    assert list(msgs) == ["a"]  # the first of the sampled clients, sorted
    assert set(msgs["a"].arrays) >= {WEIGHTS, POOL}
    # the classifier travels with the encoder
    assert any(k.startswith("classifier.") for k in msgs["a"].group(WEIGHTS))
    twin = h.server(["a", "b"])
    twin.load_state(server.state())
    assert twin.stages(3) == (FIT,)
    np.testing.assert_array_equal(twin.pool["labels"], server.pool["labels"])


def test_the_trainer_fits_the_whole_pool_with_cross_entropy(tmp_path: Path) -> None:
    h = central(tmp_path, "central_supervised")
    server = h.server(["a", "b"])
    server.aggregate(UPLOAD, 1, uploads(h))
    msg = server.configure(FIT, 1, ["a", "b"])["a"]
    client = h.client("a")
    reply = client.handle(FIT, msg, ClientState())
    assert reply.scalars["num_examples"] == len(server.pool["images"])
    assert any(k.startswith("classifier.") for k in reply.group(WEIGHTS))
    # the loss is the FedModel's cross-entropy on the pooled labels
    assert isinstance(client, CentralSupervisedClient)
    net = SSLNet(
        client.ctx.task.images().build_model(),
        torch.nn.ModuleDict(),
        torch.nn.ModuleDict(),
    )
    x = torch.rand((4, 3, 16, 16), generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 1, 0])
    out = client.loss(net.eval(), x, y)
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(net.model(x), y)
    torch.testing.assert_close(out["loss"].detach(), expected)


def test_central_upper_bound_pools_every_client(tmp_path: Path) -> None:
    cfg = ssl_cfg(tmp_path, "central_simclr")
    ds = load_dataset(cfg.data)
    run = InProcessRun(cfg, ds, lodo_plan(ds, ["hospital_2"])[0], 0, tmp_path / "r")
    run.run()
    server = run.server
    assert isinstance(server, CentralSimCLRServer)
    assert len(server.pool["images"]) == sum(len(c.train) for c in run.clients)
    assert "labels" not in server.pool  # SimCLR uploads no labels
