"""The in-process runtime (:mod:`fedpath.runtime.inprocess`): every algorithm on
its data kind, seeds, resume, and the server's aggregation of the replies (model
selection on validation slides: ``test_inprocess_selection.py``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.algorithms.base import ALGORITHMS
from fedpath.config import ExperimentConfig, load_config
from fedpath.data.partition import lodo_plan
from fedpath.models.backbones import NORM_TYPES, keys_of_modules
from fedpath.runtime.experiment import load_dataset, run_dir_for, run_experiment
from fedpath.runtime.inprocess import InProcessRun
from fedpath.types import ArrayDict, Payload, Scalar
from tests.conftest import tiny_overrides
from tests.runtime.conftest import eval_lines, final_weights, global_weights


def _smoke_config(tmp_path: Path, algorithm: str) -> ExperimentConfig:
    """The tiny config of ``algorithm``'s data kind: slide bags (MIL, judged per
    client), self-supervised images (linear probe) or supervised images."""
    from fedpath.algorithms.ssl_common import SSLClient
    from tests.mil_helpers import TINY as BAGS

    spec = ALGORITHMS.get(algorithm)
    if spec.data == "bags":
        extra = [
            "algorithm.params.tokens=10",
            "algorithm.params.iters=2",
            "algorithm.params.t0=1",
        ]
        extra = extra if algorithm == "fedhd" else []
        return load_config(
            None,
            [*BAGS, f"output_dir={tmp_path}", f"algorithm.name={algorithm}", *extra],
        )
    if issubclass(spec.client, SSLClient):
        return load_config(
            None,
            tiny_overrides(
                tmp_path,
                f"algorithm.name={algorithm}",
                "evaluation.protocol=linear_probe",
                "evaluation.probe_folds=2",
                "lodo.targets=[hospital_2]",
                "train.rounds=1",
            ),
        )
    # dp_fedavg refuses BatchNorm running statistics that train: GroupNorm
    norm = ["model.params.norm=group"] if algorithm == "dp_fedavg" else []
    return load_config(
        None,
        tiny_overrides(
            tmp_path, f"algorithm.name={algorithm}", "lodo.targets=[hospital_2]", *norm
        ),
    )


@pytest.mark.parametrize("algorithm", ALGORITHMS.names())
def test_every_algorithm_on_its_data_kind(tmp_path: Path, algorithm: str) -> None:
    """Images, slide bags and self-supervised: each method trains, checkpoints and
    is judged by its protocol through the same runtime."""
    cfg = _smoke_config(tmp_path, algorithm)
    records = run_experiment(cfg)
    assert len(records) == len(cfg.seeds)
    ev = records[0]["evaluation"]
    if cfg.evaluation.protocol == "local":
        assert ev["clients"] and all(
            0.0 <= m["accuracy"] <= 1.0 for m in ev["clients"].values()
        )
    else:
        assert 0.0 <= ev["target"]["accuracy"] <= 1.0
    if cfg.evaluation.protocol == "linear_probe":  # probed on the target's test split
        test = load_dataset(cfg.data).split("hospital_2", "test")
        assert ev["target"]["n"] == len(test)
    if cfg.evaluation.protocol == "classifier":
        assert ev["target"]["n"] == 48  # the whole unseen hospital
        assert set(ev["source"]) == {"hospital_0", "hospital_1"}
    target = "none" if cfg.lodo.targets == "none" else "hospital_2"
    run_dir = run_dir_for(cfg, target, 0)
    files = ["config.yaml", "results.jsonl", "checkpoint.pt", "final.json"]
    if ALGORITHMS.get(algorithm).data == "images":
        files.append("model.fpm")  # MIL models are not exported yet
    for name in files:
        assert (run_dir / name).is_file(), name
    rounds = [
        json.loads(x)
        for x in (run_dir / "results.jsonl").read_text().splitlines()
        if '"kind": "round"' in x
    ]
    assert [r["round"] for r in rounds] == list(range(1, cfg.train.rounds + 1))


def test_same_seed_same_numbers_different_seed_differs(tmp_path: Path) -> None:
    def run(seed: int, sub: str) -> tuple[dict[str, torch.Tensor], list[dict]]:
        cfg = load_config(
            None,
            tiny_overrides(
                tmp_path / sub, f"seeds=[{seed}]", "lodo.targets=[hospital_0]"
            ),
        )
        run_experiment(cfg)
        d = run_dir_for(cfg, "hospital_0", seed)
        return final_weights(d), eval_lines(d)

    w1, e1 = run(3, "a")
    w2, e2 = run(3, "b")
    w3, _ = run(4, "c")
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    assert e1 == e2
    assert any(not torch.equal(w1[k], w3[k]) for k in w1 if w1[k].is_floating_point())


@pytest.mark.parametrize("algorithm", ["fedavg", "fedbn"])
def test_resume_reproduces_uninterrupted_run(
    tmp_path: Path, algorithm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    over = [
        "train.rounds=3",
        "lodo.targets=[hospital_1]",
        f"algorithm.name={algorithm}",
    ]
    full_cfg = load_config(None, tiny_overrides(tmp_path / "full", *over))
    run_experiment(full_cfg)
    full_dir = run_dir_for(full_cfg, "hospital_1", 0)

    cfg = load_config(None, tiny_overrides(tmp_path / "crash", *over))
    original = InProcessRun.run_round

    def crash_in_round_3(self: InProcessRun, rnd: int) -> dict:
        if rnd == 3:
            # half of round 3 happened (results appended), then the process dies
            self.evaluate(rnd)
            raise KeyboardInterrupt
        return original(self, rnd)

    monkeypatch.setattr(InProcessRun, "run_round", crash_in_round_3)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg)
    crash_dir = run_dir_for(cfg, "hospital_1", 0)
    assert not (crash_dir / "final.json").exists()
    monkeypatch.setattr(InProcessRun, "run_round", original)
    run_experiment(cfg, resume=True)

    wa, wb = final_weights(full_dir), final_weights(crash_dir)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert eval_lines(full_dir) == eval_lines(crash_dir)
    # resuming a finished run does nothing and returns the same record
    again = run_experiment(cfg, resume=True)
    assert (
        again[0]["evaluation"]
        == json.loads((crash_dir / "final.json").read_text())["evaluation"]
    )


class Spy:
    """Wraps a server's aggregate to record the replies it received."""

    def __init__(self, run: InProcessRun) -> None:
        self.replies: dict[str, Payload] = {}
        inner = run.server.aggregate

        def aggregate(
            stage: str, rnd: int, replies: Mapping[str, Payload]
        ) -> dict[str, Scalar]:
            self.replies = {c: p.copy() for c, p in replies.items()}
            return inner(stage, rnd, replies)

        run.server.aggregate = aggregate  # type: ignore[method-assign]


def one_run(tmp_path: Path, *extra: str) -> InProcessRun:
    cfg = load_config(None, tiny_overrides(tmp_path, "train.rounds=1", *extra))
    ds = load_dataset(cfg.data)
    fold = lodo_plan(ds, ["hospital_0"])[0]
    return InProcessRun(cfg, ds, fold, 0, tmp_path / "run")


def test_server_weights_are_the_example_weighted_mean(tmp_path: Path) -> None:
    run = one_run(tmp_path)
    spy = Spy(run)
    run.run()
    n = {c: float(p.scalars["num_examples"]) for c, p in spy.replies.items()}
    assert n == {c.client_id: float(len(c.train)) for c in run.clients}
    glob = global_weights(run)
    for key, value in glob.items():
        if not np.issubdtype(value.dtype, np.floating):
            continue
        ref = np.average(
            np.stack([p.arrays["weights"][key] for p in spy.replies.values()]),
            axis=0,
            weights=list(n.values()),
        )
        np.testing.assert_allclose(value, ref, rtol=1e-5, atol=1e-7)


def test_fedbn_keeps_normalization_local(tmp_path: Path) -> None:
    run = one_run(tmp_path, "algorithm.name=fedbn", "train.rounds=2")
    spy = Spy(run)
    run.run()
    norm = keys_of_modules(run.task.build_model(), NORM_TYPES)
    assert norm and all("encoder" in k for k in norm)
    # the broadcast leaves normalization out; each client kept its own copy
    msg = run.server.configure("fit", 3, ["hospital_1/c0"])["hospital_1/c0"]
    assert not norm & set(msg.arrays["weights"])
    states = [run.states[c.client_id].arrays["local"] for c in run.clients]
    assert all(set(s) == norm for s in states)
    mean_key = next(k for k in norm if k.endswith("running_mean"))
    assert not np.allclose(states[0][mean_key], states[-1][mean_key])
    # and uploaded values equal the kept ones (what the client trained with)
    for c in run.clients:
        up = spy.replies[c.client_id].arrays["weights"][mean_key]
        np.testing.assert_array_equal(
            up, run.states[c.client_id].arrays["local"][mean_key]
        )


def test_fedprox_mu_zero_equals_fedavg_and_large_mu_stays_close(tmp_path: Path) -> None:
    def client_drift(*extra: str) -> tuple[ArrayDict, float]:
        run = one_run(tmp_path / "_".join(extra).replace("=", ""), *extra)
        start = {k: v.copy() for k, v in global_weights(run).items()}
        spy = Spy(run)
        run.run()
        drift = np.mean(
            [
                np.sqrt(
                    sum(
                        float(((p.arrays["weights"][k] - start[k]) ** 2).sum())
                        for k in start
                        if "weight" in k
                    )
                )
                for p in spy.replies.values()
            ]
        )
        return global_weights(run), float(drift)

    sgd = ("train.optimizer=sgd", "train.lr=0.05", "train.local_epochs=3")
    avg, d_avg = client_drift("algorithm.name=fedavg", *sgd)
    prox0, _ = client_drift("algorithm.name=fedprox", "algorithm.params.mu=0", *sgd)
    assert all(np.array_equal(avg[k], prox0[k]) for k in avg)
    _, d_prox = client_drift("algorithm.name=fedprox", "algorithm.params.mu=5", *sgd)
    assert d_prox < 0.8 * d_avg
