"""Where a run's algorithm halves are assembled: :mod:`fedpath.runtime.context`."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.algorithms.base import ALGORITHMS
from fedpath.config import load_config
from fedpath.data.base import DomainDataset
from fedpath.data.partition import ClientData
from fedpath.params.algorithms import FedProxParams
from fedpath.runtime.context import RunContext
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks.base import TaskMismatch
from tests.conftest import tiny_overrides


def _context(tmp_path: Path, *extra: str) -> tuple[RunContext, DomainDataset]:
    cfg = load_config(None, tiny_overrides(tmp_path, *extra))
    ds = load_dataset(cfg.data)
    return RunContext.build(cfg, ds), ds


def test_build_resolves_the_params_into_their_typed_dataclass(tmp_path: Path) -> None:
    run, _ = _context(tmp_path, "algorithm.name=fedprox", "algorithm.params.mu=0.25")
    assert type(run.params) is FedProxParams
    assert run.params.mu == 0.25
    assert run.spec is ALGORITHMS.get("fedprox")
    assert run.task.kind == run.spec.data == "images"


def test_build_refuses_an_algorithm_for_another_data_kind(tmp_path: Path) -> None:
    # FedHD trains slide-bag MIL models; the tiny federation holds images
    cfg = load_config(None, tiny_overrides(tmp_path))
    other = cfg.replace(**{"algorithm.name": "fedhd", "algorithm.params": {}})
    with pytest.raises(TaskMismatch, match="fedavg"):  # names the fitting ones
        RunContext.build(other, load_dataset(cfg.data))


def test_client_context_carries_the_client_and_the_round(tmp_path: Path) -> None:
    run, ds = _context(tmp_path)
    train, test = ds.split("hospital_1", "train"), ds.split("hospital_1", "test")
    client = ClientData("c7", "hospital_1", train, test)

    def on_epoch(a: int, b: int) -> None: ...

    ctx = run.client_context(client, round=3, seed=5, on_epoch=on_epoch)
    assert (ctx.client_id, ctx.domain) == ("c7", "hospital_1")
    assert (ctx.round, ctx.seed) == (3, 5)
    assert ctx.data is train and ctx.test is test
    assert ctx.task is run.task and ctx.on_epoch is on_epoch


def test_each_half_is_fresh_and_the_server_sees_the_roster(tmp_path: Path) -> None:
    run, ds = _context(tmp_path)
    clients = [
        ClientData(f"c{i}", d, ds.split(d, "train")) for i, d in enumerate(ds.domains)
    ]
    a = run.client_half(clients[0], round=1, seed=0)
    b = run.client_half(clients[0], round=1, seed=0)
    assert a is not b  # nothing lives on a half between calls
    weights = run.task.initial_model().state_dict()
    init = {k: v.detach().numpy() for k, v in weights.items()}
    server = run.server_half(initial_weights=init, clients=clients, seed=0)
    assert server.ctx.client_ids == ["c0", "c1", "c2"]
    assert server.ctx.client_domains == dict(
        zip(["c0", "c1", "c2"], ds.domains, strict=True)
    )
    assert server.ctx.initial_weights is init and server.ctx.task is run.task
