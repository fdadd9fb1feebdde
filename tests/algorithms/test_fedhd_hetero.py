"""FedHD with heterogeneous feature extractors (``algorithm.params.spaces: adapt``)."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from fedpath.algorithms.fedhd import FedHDClient, FedHDParams, FedHDServer
from fedpath.algorithms.mil_common import arrays_to_spaced, bags_to_arrays
from fedpath.algorithms.mil_spaces import ADAPTERS
from fedpath.config import ConfigError, ExperimentConfig, load_config
from fedpath.data.bags import split_bags
from fedpath.evaluation.metrics import classification_metrics
from fedpath.loading import load_mil_model
from fedpath.mil.adapters import AdaptedMIL, space_key
from fedpath.mil.bags import SlideBag
from fedpath.mil.export import client_file
from fedpath.mil.models import build_mil_model
from fedpath.runtime.experiment import load_dataset, run_dir_for, run_experiment
from fedpath.tasks.bags import BagTask
from fedpath.types import ClientState, Payload
from tests.mil_helpers import (
    FEDHD,
    OWN,
    SAME,
    SPACES,
    TINY,
    inprocess_run,
    same_metrics,
    tiny,
)

FEDHD_ADAPT = [*FEDHD, SPACES, "algorithm.params.spaces=adapt"]


def _replies(dims: dict[str, tuple[str, int]]) -> dict[str, Payload]:
    out = {}
    for i, (cid, (space, d)) in enumerate(sorted(dims.items())):
        bags = [
            SlideBag(f"{cid}-{j}", torch.full((3, d), i + j + 0.5), j, "h")
            for j in range(2)
        ]
        out[cid] = Payload(
            {"synthetic": bags_to_arrays(bags)},
            {"embedding_space": space, "dim": d, "num_slides": 2},
        )
    return out


def test_server_accepts_differing_spaces_only_with_the_option(tmp_path: Path) -> None:
    run = inprocess_run(tiny(tmp_path, *FEDHD, SAME), tmp_path)
    params = run.run_ctx.params
    assert isinstance(params, FedHDParams)
    same = FedHDServer(params, run.server.ctx)
    replies = _replies(OWN)
    with pytest.raises(ConfigError, match=r"algorithm\.params\.spaces: adapt") as err:
        same.aggregate("distill", 1, replies)
    assert "hospital_1/c0: project5-s0 (D=5)" in str(err.value)
    adapt = FedHDServer(FedHDParams(spaces="adapt"), run.server.ctx)
    scalars = adapt.aggregate("distill", 1, replies)
    assert scalars["embedding_spaces"] == 3 and scalars["synthetic_slides"] == 6
    out = adapt.configure("fit", 1, sorted(OWN))
    for cid, payload in out.items():
        parts = arrays_to_spaced(payload.arrays["received"], payload.scalars)
        # one stack per *other* client's space, none of the receiver's own slides
        assert sorted(s for s, _ in parts) == sorted(
            s for c, (s, _) in OWN.items() if c != cid
        )
        for space, part in parts:
            d = dict(OWN.values())[space]
            assert part["features"].shape == (6, d)
            assert part["sizes"].tolist() == [3, 3]
    # a receiver sharing its space with another client gets that client's
    # slides of its space straight (one stack), never its own
    shared = FedHDServer(FedHDParams(spaces="adapt"), run.server.ctx)
    both = {**OWN, "hospital_3/c0": ("synthetic", 8)}
    shared.aggregate("distill", 1, _replies(both))
    for cid, payload in shared.configure("fit", 1, sorted(both)).items():
        got = dict(arrays_to_spaced(payload.arrays["received"], payload.scalars))
        for space, part in got.items():
            owners = [c for c, (s, _) in both.items() if s == space and c != cid]
            assert len(part["sizes"]) == 2 * len(owners), (cid, space)
    # one name with two dimensions is refused in either mode
    bad = _replies({"a": ("uni", 5), "b": ("uni", 6)})
    with pytest.raises(ConfigError, match="one embedding space with different"):
        adapt.aggregate("distill", 1, bad)
    # the pool survives a checkpoint, per space
    other = FedHDServer(FedHDParams(spaces="adapt"), run.server.ctx)
    other.load_state(adapt.state())
    assert other.pool.spaces == adapt.pool.spaces
    for c in OWN:
        for k in ("features", "sizes", "labels"):
            assert np.array_equal(other.pool.slides[c][k], adapt.pool.slides[c][k])


def test_same_mode_run_with_own_extractors_names_the_option(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, *FEDHD, SPACES, SAME)
    with pytest.raises(ConfigError, match=r"algorithm\.params\.spaces: adapt"):
        inprocess_run(cfg, tmp_path).run()


def test_weight_averaging_refuses_own_extractors() -> None:
    with pytest.raises(ConfigError, match="algorithm.params.features"):
        load_config(None, [*TINY, "algorithm.name=fedavg_mil", SPACES])


def test_payload_holds_only_synthetic_slides(tmp_path: Path) -> None:
    run = inprocess_run(tiny(tmp_path, *FEDHD_ADAPT), tmp_path)
    params = run.run_ctx.params
    assert isinstance(params, FedHDParams)
    task = run.task
    assert isinstance(task, BagTask)
    reals: list[np.ndarray] = []  # every real patch embedding, in every space
    for c in run.clients:
        for split in (c.train, c.test):
            assert split is not None
            for space in ("synthetic", "project5-s0", "project12-s3"):
                reals += [b.features.numpy() for b in task.slides(split, space)]
    replies = {}
    for cid in sorted(run.by_id):
        ctx = run.client_half(cid, 1).ctx
        reply = FedHDClient(params, ctx).handle("distill", Payload(), ClientState())
        assert set(reply.arrays) == {"synthetic"}  # nothing but synthetic slides
        assert set(reply.arrays["synthetic"]) == {"features", "sizes", "labels"}
        space, d = OWN[cid]
        assert (reply.scalars["embedding_space"], reply.scalars["dim"]) == (space, d)
        syn = reply.arrays["synthetic"]
        assert syn["features"].shape == (20 * len(ctx.data), d)  # T tokens per slide
        replies[cid] = reply
    server = FedHDServer(params, run.server.ctx)
    server.aggregate("distill", 1, replies)
    for cid, payload in server.configure("fit", 1, sorted(run.by_id)).items():
        assert set(payload.arrays) == {"received"}
        parts = arrays_to_spaced(payload.arrays["received"], payload.scalars)
        n = sum(len(p["sizes"]) for _, p in parts)
        assert n == sum(
            int(r.scalars["num_slides"]) for c, r in replies.items() if c != cid
        )
        for _, part in parts:  # no received token is a real patch embedding
            tokens = part["features"]
            for real in reals:
                if real.shape[1] == tokens.shape[1]:
                    dist = ((tokens[:, None] - real[None]) ** 2).sum(-1)
                    assert dist.min() > 1e-6


@pytest.fixture(scope="module")
def hetero(tmp_path_factory: pytest.TempPathFactory) -> tuple[ExperimentConfig, Path]:
    tmp = tmp_path_factory.mktemp("fedhd_hetero")
    cfg = load_config(
        None,
        [
            f"output_dir={tmp}",
            *TINY,
            *FEDHD_ADAPT,
            "seeds=[0]",
            "algorithm.params.models={hospital_2: transmil}",
            "algorithm.params.model_params={transmil: {hidden: 16, landmarks: 4}}",
        ],
    )
    run_experiment(cfg)
    return cfg, run_dir_for(cfg, "none", 0)


def test_two_spaces_of_different_dims_train_end_to_end(
    hetero: tuple[ExperimentConfig, Path],
) -> None:
    _, run_dir = hetero
    final = json.loads((run_dir / "final.json").read_text())
    clients = final["evaluation"]["clients"]
    assert sorted(clients) == sorted(OWN)
    for m in clients.values():
        assert 0.0 <= m["balanced_accuracy"] <= 1.0 and m["n"] >= 2
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").open()]
    (distill,) = [r for r in rows if r["kind"] == "round"]
    assert distill["distill/embedding_spaces"] == 3
    assert distill["fit/adapted_spaces"] == 2  # every client: two foreign spaces


def test_adapters_are_trained_and_kept_apart_from_the_model(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, *FEDHD_ADAPT)
    run = inprocess_run(cfg, tmp_path)
    run.run()
    for cid, (_, d) in OWN.items():
        state = run.states[cid]
        adapters = state.arrays[ADAPTERS]
        foreign = {s: dd for c, (s, dd) in OWN.items() if c != cid}
        for s, dd in foreign.items():
            assert adapters[f"{space_key(s)}.1.weight"].shape == (d, dd)
        # adapter weights moved away from their initialisation
        torch.manual_seed(run.client_half(cid, 1).ctx.seed_for("adapters"))
        fresh = AdaptedMIL(build_mil_model("abmil", d, 2), foreign)
        init = fresh.adapters.state_dict()
        assert any(not np.allclose(adapters[k], init[k].numpy()) for k in adapters)
        # the deployed model: the own model alone, own dimension
        assert not any(k.startswith("adapters") for k in state.arrays["model"])
        model = run.client_half(cid, 1).deployed_model(Payload(), state)
        assert model.in_dim == d and not isinstance(model, AdaptedMIL)


def test_exported_model_evaluates_own_space_bags_as_the_run(
    hetero: tuple[ExperimentConfig, Path],
) -> None:
    cfg, run_dir = hetero
    final = json.loads((run_dir / "final.json").read_text())
    ds = load_dataset(cfg.data)
    task = BagTask(cfg, ds)
    for cid, (space, d) in OWN.items():
        model = load_mil_model(client_file(run_dir / "models", cid))
        assert model.in_dim == d and model.embedding_space == space
        assert not any("adapter" in k for k in model.model.state_dict())
        domain = cid.split("/")[0]
        test = ds.split(domain, "test")
        bags = task.client_slides(test, cid, domain)
        assert all(b.dim == d for b in bags)
        probs = model.predict_proba(bags)
        ours = {**classification_metrics(test.labels, probs), "n": len(test)}
        same_metrics(final["evaluation"]["clients"][cid], ours)
        # a bag of the dataset's space (D = 8) is refused by a foreign-space model
        if d != 8:
            with pytest.raises(Exception, match=f"expects {d}"):
                model.predict_proba(split_bags(test))


def test_folder_feature_set_reads_its_own_bag_files(tmp_path: Path) -> None:
    ds = load_dataset(load_config(None, TINY).data)
    root = tmp_path / "lite0"
    (root / "h5_files").mkdir(parents=True)
    gen = torch.Generator().manual_seed(0)
    for b in split_bags(ds.split("hospital_1", "all")):
        with h5py.File(root / "h5_files" / f"{b.slide_id}.h5", "w") as fh:
            fh.create_dataset("features", data=torch.randn(4, 6, generator=gen).numpy())
            fh.attrs["backbone"] = "efficientnet_lite0"
    cfg = tiny(
        tmp_path,
        "algorithm.name=local_mil",
        f"algorithm.params.features={{hospital_1: {{root: {root}}}}}",
    )
    rec = inprocess_run(cfg, tmp_path).run()
    assert len(rec["evaluation"]["clients"]) == 3
    model = load_mil_model(client_file(tmp_path / "run" / "models", "hospital_1/c0"))
    assert model.in_dim == 6 and model.embedding_space == "lite0"
    assert model.meta.encoder["backbone"] == "efficientnet_lite0"
    assert model.meta.data["root"] == str(root)


def test_adapt_in_one_space_trains_exactly_what_same_does(tmp_path: Path) -> None:
    """Issue 39: ``adapt`` is FedHD's default because, with every client in the
    dataset's one space, it sends the same slides and trains the same models as
    ``same`` (no adapter is built): the same numbers, round 2 included."""
    assert FedHDParams().spaces == "adapt"
    two = ("train.rounds=2", "train.local_epochs=2")
    runs = {}
    for mode in ("same", "adapt"):
        cfg = tiny(tmp_path / mode, *FEDHD, *two, f"algorithm.params.spaces={mode}")
        run = inprocess_run(cfg, tmp_path / mode)
        runs[mode] = (run.run(), run)
    (rec_same, same), (rec_adapt, adapt) = runs["same"], runs["adapt"]
    assert rec_adapt["evaluation"]["clients"] == rec_same["evaluation"]["clients"]
    assert sorted(adapt.states) == sorted(same.states)
    for cid, state in same.states.items():
        other = adapt.states[cid]
        assert ADAPTERS not in other.arrays  # one space: nothing to adapt
        model = state.arrays["model"]
        assert sorted(other.arrays["model"]) == sorted(model)
        for k, v in model.items():
            np.testing.assert_array_equal(other.arrays["model"][k], v)
