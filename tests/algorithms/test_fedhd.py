"""FedHD and the slide-bag baselines through the runtime (bags, exchange, audit)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.algorithms.base import ClientContext, ServerContext
from fedpath.algorithms.fedhd import FedHDClient, FedHDParams, FedHDServer
from fedpath.algorithms.mil_common import bags_to_arrays
from fedpath.config import ConfigError, load_config
from fedpath.data.bags import BagStore, split_bags
from fedpath.data.partition import lodo_plan, make_clients
from fedpath.mil.bags import SlideBag
from fedpath.runtime.experiment import collect_rows, load_dataset, run_experiment
from fedpath.runtime.inprocess import InProcessRun
from fedpath.types import ClientState, Payload
from tests.mil_helpers import FEDHD, SAME, TINY, inprocess_run, tiny


def test_bag_dataset_is_a_domain_dataset_split_by_slide() -> None:
    ds = load_dataset(load_config(None, TINY).data)
    assert ds.kind == "bags" and ds.domains == [
        "hospital_0",
        "hospital_1",
        "hospital_2",
    ]
    train, test = ds.split("hospital_1", "train"), ds.split("hospital_1", "test")
    assert len(train) + len(test) == 8 and len(test) >= 2
    assert not set(train.slides) & set(test.slides)
    bags = split_bags(test)
    assert all(b.domain == "hospital_1" for b in bags)
    assert [b.label for b in bags] == test.labels.tolist()
    with pytest.raises(ValueError, match="slide bags"):
        test.load(np.arange(1))


def test_no_target_fold_and_per_client_test_splits() -> None:
    cfg = load_config(None, TINY)
    ds = load_dataset(cfg.data)
    (fold,) = lodo_plan(ds, "none")
    assert fold.target == "none" and fold.sources == ds.domains
    clients = make_clients(ds, fold.sources, cfg.partition, seed=0)
    for c in clients:
        assert c.test is not None
        assert set(c.test.slides) == set(ds.split(c.domain, "test").slides)


def test_none_target_requires_local_protocol() -> None:
    with pytest.raises(ConfigError, match="evaluation.protocol"):
        load_config(None, ["lodo.targets=none"])


def test_fedhd_end_to_end_trains_each_client_and_evaluates_locally(
    tmp_path: Path,
) -> None:
    cfg = tiny(
        tmp_path,
        *FEDHD,
        "algorithm.params.models={hospital_2: transmil}",
        "algorithm.params.model_params={transmil: {hidden: 16, landmarks: 4}}",
    )
    run = inprocess_run(cfg, tmp_path)
    rec = run.run()
    clients = rec["evaluation"]["clients"]
    assert sorted(clients) == ["hospital_0/c0", "hospital_1/c0", "hospital_2/c0"]
    for m in clients.values():
        assert 0.0 <= m["accuracy"] <= 1.0 and m["n"] >= 2
    # heterogeneous: hospital_2 keeps a TransMIL, the others the configured ABMIL
    arch = {c: s.scalars["architecture"] for c, s in run.states.items()}
    assert arch["hospital_2/c0"] == "transmil" and arch["hospital_0/c0"] == ""
    keys2 = set(run.states["hospital_2/c0"].arrays["model"])
    assert keys2 != set(run.states["hospital_0/c0"].arrays["model"])
    # one synthetic slide per real training slide crossed the network, no weights
    rows = [
        r
        for r in map(__import__("json").loads, (run.run_dir / "results.jsonl").open())
        if r["kind"] == "round"
    ]
    n_train = sum(len(c.train) for c in run.clients)
    assert rows[0]["distill/synthetic_slides"] == n_train
    table = collect_rows([tmp_path], "clients")
    assert {r.target for r in table} == set(clients)


def _ctx(run: InProcessRun, cid: str) -> ClientContext:
    return run.client_half(cid, 1).ctx


def test_payload_audit_only_synthetic_slides_leave_a_client(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, *FEDHD, SAME)
    run = inprocess_run(cfg, tmp_path)
    params = run.run_ctx.params
    assert isinstance(params, FedHDParams)
    ctx = _ctx(run, "hospital_0/c0")
    reply = FedHDClient(params, ctx).handle("distill", Payload(), ClientState())
    assert set(reply.arrays) == {"synthetic"}
    syn = reply.arrays["synthetic"]
    real = torch.cat([b.features for b in split_bags(ctx.data)]).numpy()
    assert syn["sizes"].tolist() == [20] * len(ctx.data)  # T tokens per slide
    # no synthetic token is a copy of a real patch embedding
    dist = ((syn["features"][:, None, :] - real[None, :, :]) ** 2).sum(-1)
    assert dist.min() > 1e-6
    # the server sends each client the others' slides, never its own
    server = FedHDServer(params, run.server.ctx)
    replies = {
        c: FedHDClient(params, _ctx(run, c)).handle("distill", Payload(), ClientState())
        for c in sorted(run.by_id)
    }
    server.aggregate("distill", 1, replies)
    out = server.configure("fit", 1, sorted(run.by_id))
    for cid, payload in out.items():
        got = payload.arrays["received"]["features"]
        own = replies[cid].arrays["synthetic"]["features"]
        others = sum(
            len(r.arrays["synthetic"]["sizes"]) for c, r in replies.items() if c != cid
        )
        assert len(payload.arrays["received"]["sizes"]) == others
        assert not any(np.array_equal(got[i], own[0]) for i in range(len(got)))
        assert set(payload.arrays) == {"received"}


def test_clients_in_different_embedding_spaces_are_refused(tmp_path: Path) -> None:
    run = inprocess_run(tiny(tmp_path, *FEDHD, SAME), tmp_path)
    server = FedHDServer(run.run_ctx.params, run.server.ctx)
    arrays = bags_to_arrays([SlideBag("a", torch.zeros(2, 8), 0, "h")])
    replies = {
        "hospital_0/c0": Payload(
            {"synthetic": arrays},
            {"embedding_space": "uni", "dim": 8, "num_slides": 1},
        ),
        "hospital_1/c0": Payload(
            {"synthetic": arrays},
            {"embedding_space": "resnet50-imagenet", "dim": 8, "num_slides": 1},
        ),
    }
    with pytest.raises(ConfigError, match="hospital_1/c0: resnet50-imagenet"):
        server.aggregate("distill", 1, replies)


def test_server_state_round_trips(tmp_path: Path) -> None:
    run = inprocess_run(tiny(tmp_path, *FEDHD, SAME), tmp_path)
    ctx: ServerContext = run.server.ctx
    server = FedHDServer(run.run_ctx.params, ctx)
    a, b = ctx.client_ids[2], ctx.client_ids[0]
    server.pool.slides = {
        a: bags_to_arrays([SlideBag("x", torch.ones(3, 8), 1, "h")]),
        b: bags_to_arrays(
            [
                SlideBag("y", torch.zeros(2, 8), 0, "h"),
                SlideBag("z", 2 * torch.ones(4, 8), 1, "h"),
            ]
        ),
    }
    saved = server.state()
    assert set(saved.arrays) == {"pool"}  # one group; no client id in any key
    other = FedHDServer(run.run_ctx.params, ctx)
    other.load_state(saved)
    assert set(other.pool.slides) == {a, b}
    for c in (a, b):
        for k in ("features", "sizes", "labels"):
            assert np.array_equal(other.pool.slides[c][k], server.pool.slides[c][k])
    empty = FedHDServer(run.run_ctx.params, ctx)
    empty.load_state(FedHDServer(run.run_ctx.params, ctx).state())
    assert empty.pool.slides == {}


def test_model_params_for_an_unchosen_architecture_are_refused() -> None:
    with pytest.raises(ConfigError, match="model_params"):
        load_config(
            None,
            [*TINY, *FEDHD, "algorithm.params.model_params={transmil: {hidden: 8}}"],
        )


def test_t0_beyond_training_is_refused(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, *FEDHD[:-1], "algorithm.params.t0=3")
    with pytest.raises(ConfigError, match="t0"):
        inprocess_run(cfg, tmp_path).run()


@pytest.mark.parametrize(
    "algo", ["local_mil", "fedavg_mil", "fedprox_mil", "pooled_mil"]
)
def test_baselines_run_and_report_every_client(tmp_path: Path, algo: str) -> None:
    cfg = tiny(tmp_path, f"algorithm.name={algo}", "train.rounds=2")
    run = inprocess_run(cfg, tmp_path)
    init = {k: v.copy() for k, v in (run.server.global_weights() or {}).items()}
    rec = run.run()
    assert len(rec["evaluation"]["clients"]) == 3
    weights = run.server.global_weights()
    if algo == "local_mil":
        assert weights is None and all("model" in s.arrays for s in run.states.values())
    else:
        assert weights is not None
        assert any(not np.array_equal(init[k], weights[k]) for k in init)


def test_image_algorithm_on_bags_and_bag_algorithm_on_images_fail_clearly(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match="trains on images, but dataset"):
        inprocess_run(tiny(tmp_path, "algorithm.name=fedavg"), tmp_path)
    img = load_config(
        None,
        [
            f"output_dir={tmp_path}",
            "data.params.samples_per_hospital=16",
            "data.params.image_size=16",
            "algorithm.name=local_mil",
            "evaluation.protocol=local",
            "train.rounds=1",
            "lodo.targets=[hospital_0]",
        ],
    )
    with pytest.raises(ConfigError, match="algorithms for images: .*fedavg"):
        run_experiment(img)


def test_bag_store_reports_its_space() -> None:
    ds = load_dataset(load_config(None, TINY).data)
    assert isinstance(ds.store, BagStore)
    assert ds.store.embedding_space == "synthetic" and ds.store.dim == 8


def test_fedhd_demo_command_prints_the_clients_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedpath.cli import main

    code = main(
        [
            "demo",
            "fedhd",
            f"output_dir={tmp_path}",
            "seeds=[0]",
            "data.params.slides_per_hospital=8",
            "data.params.dim=8",
            "data.params.min_patches=30",
            "data.params.max_patches=40",
            "train.local_epochs=2",
            "--methods",
            "local",
            "--quiet",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "clients' own test splits" in out and "hospital_3/c0" in out
    assert "| local |" in out


def test_unknown_demo_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    from fedpath.cli import main

    assert main(["demo", "fedxyz"]) != 0
    assert "demo 'fedxyz' does not exist; choices: stain, fedhd, fedad" in (
        capsys.readouterr().err.replace("\n", " ")
    )
