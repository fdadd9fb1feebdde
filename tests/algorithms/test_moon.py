"""MOON on SimCLR (fedpath.algorithms.moon): the model-contrastive term computed by
hand against the frozen global and previous models, the previous model kept in
the client state, and l_con = 0 in a client's first round."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedpath.algorithms.moon import MOONClient
from fedpath.algorithms.names import MOON_PREV
from fedpath.algorithms.ssl_common import SSLNet
from fedpath.data.partition import lodo_plan
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.inprocess import InProcessRun
from fedpath.types import ClientState, Payload
from tests.algorithms.halves import halves
from tests.ssl_helpers import ssl_cfg


def moon_client(tmp_path: Path, *params: str) -> MOONClient:
    over = ["algorithm.params.proj_dim=8", *(f"algorithm.params.{p}" for p in params)]
    client = halves(ssl_cfg(tmp_path, "moon", *over)).client()
    assert isinstance(client, MOONClient)
    return client


def net_of(client: MOONClient, seed: int) -> SSLNet:
    torch.manual_seed(seed)
    model = client.ctx.task.images().build_model()
    shared = nn.ModuleDict(client.build_shared(client.params, model.feature_dim))
    return SSLNet(model, shared, nn.ModuleDict()).eval()


def views() -> tuple[torch.Tensor, torch.Tensor]:
    a, b = torch.rand((2, 4, 3, 16, 16), generator=torch.Generator().manual_seed(9))
    return a, b


def by_hand(r: torch.Tensor, rg: torch.Tensor, rp: torch.Tensor, t: float) -> float:
    pos = torch.exp(F.cosine_similarity(r, rg) / t)
    neg = torch.exp(F.cosine_similarity(r, rp) / t)
    return float(-torch.log(pos / (pos + neg)).mean())


@pytest.mark.parametrize("on", ["features", "projection"])
def test_model_contrastive_term_against_global_and_previous(
    tmp_path: Path, on: str
) -> None:
    client = moon_client(
        tmp_path, "mu=0.7", "moon_temperature=0.3", f"contrast_on={on}"
    )
    state = ClientState()
    client.end(net_of(client, 1), state)  # last round's local model
    net = net_of(client, 2)  # this round's global model
    client.begin(net, Payload(), state)
    with torch.no_grad():
        for p in net.parameters():  # local training moved it
            p.add_(0.05 * torch.randn_like(p))
    prev, glob = net_of(client, 1), copy.deepcopy(client.glob)
    a, b = views()
    out = client.ssl_loss(net, a, b, a)

    def rep(m: Any, x: torch.Tensor) -> torch.Tensor:
        h = m.encode(x)
        return h if on == "features" else m.shared["proj"](h)

    with torch.no_grad():
        con = 0.5 * sum(
            by_hand(rep(net, v), rep(glob, v), rep(prev, v), 0.3) for v in (a, b)
        )
    assert float(out["con"]) == pytest.approx(con, rel=1e-4)
    expected = float(out["cl"]) + 0.7 * con
    assert float(out["loss"].detach()) == pytest.approx(expected, rel=1e-4)


def test_first_round_has_no_previous_model_and_no_term(tmp_path: Path) -> None:
    client = moon_client(tmp_path)
    net = net_of(client, 0)
    client.begin(net, Payload(), ClientState())
    assert client.prev is None
    out = client.ssl_loss(net, *views(), views()[0])
    assert float(out["con"]) == 0.0
    assert float(out["loss"].detach()) == pytest.approx(float(out["cl"]))


def test_end_keeps_encoder_and_head_and_begin_restores_them(tmp_path: Path) -> None:
    client = moon_client(tmp_path)
    local = net_of(client, 3)
    state = ClientState()
    client.end(local, state)
    saved = state.arrays[MOON_PREV]
    assert {k.split(".")[0] for k in saved} == {"encoder", "head"}
    client.begin(net_of(client, 4), Payload(), state)
    assert client.prev is not None
    x = views()[0]
    with torch.no_grad():
        torch.testing.assert_close(client.prev.encode(x), local.encode(x))
        torch.testing.assert_close(
            client.prev.shared["proj"](local.encode(x)),
            local.shared["proj"](local.encode(x)),
        )


def test_moon_second_round_uses_previous_model(tmp_path: Path) -> None:
    cfg = ssl_cfg(tmp_path, "moon", "train.rounds=2")
    ds = load_dataset(cfg.data)
    run = InProcessRun(cfg, ds, lodo_plan(ds, ["hospital_2"])[0], 0, tmp_path / "r")
    run.run()
    recs = [
        json.loads(x)
        for x in (tmp_path / "r" / "results.jsonl").read_text().splitlines()
        if '"kind": "round"' in x
    ]
    assert recs[0]["fit/con"] == 0.0  # no previous model in round 1
    assert recs[1]["fit/con"] > 0.0
    assert run.cfg.algorithm.params["mu"] == 1.0
    assert all(MOON_PREV in s.arrays for s in run.states.values())
