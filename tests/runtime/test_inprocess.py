from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.algorithms.base import ALGORITHMS
from fedpath.artifact import read_model_file
from fedpath.cli import main
from fedpath.config import ConfigError, ExperimentConfig, load_config
from fedpath.data.base import DomainDataset
from fedpath.data.partition import lodo_plan
from fedpath.models.backbones import NORM_TYPES, keys_of_modules
from fedpath.runtime.experiment import (
    collect_rows,
    load_dataset,
    run_dir_for,
    run_experiment,
)
from fedpath.runtime.inprocess import InProcessRun
from fedpath.types import ArrayDict, Payload, Scalar
from tests.conftest import tiny_overrides


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return read_model_file(run_dir / "model.fpm")[1]


def eval_lines(run_dir: Path) -> list[dict]:
    lines = [
        json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()
    ]
    return [r for r in lines if r["kind"] == "eval"]


def _smoke_config(tmp_path: Path, algorithm: str) -> ExperimentConfig:
    """The tiny config of ``algorithm``'s data kind: slide bags (MIL, judged per
    client), self-supervised images (linear probe) or supervised images."""
    from fedpath.algorithms.ssl_common import SSLClient
    from tests.algorithms.test_fedhd import TINY as BAGS

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


def global_weights(run: InProcessRun) -> ArrayDict:
    """The server's global model (every algorithm here keeps one)."""
    weights = run.server.global_weights()
    assert weights is not None
    return weights


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


def test_lr_schedules() -> None:
    from fedpath.tasks.base import lr_at

    cfg = ExperimentConfig().train
    lin = load_config(
        None, ["train.schedule=linear", "train.lr=1e-4", "train.lr_end=2.5e-6"]
    ).train
    assert lr_at(cfg, 0.7) == cfg.lr
    assert lr_at(lin, 0) == pytest.approx(1e-4)
    assert lr_at(lin, 1) == pytest.approx(2.5e-6)
    assert lr_at(lin, 0.5) == pytest.approx((1e-4 + 2.5e-6) / 2)
    cos = load_config(None, ["train.schedule=cosine", "train.lr=1.0"]).train
    assert lr_at(cos, 0.5) == pytest.approx(0.5)
    assert lr_at(cos, 1.0) == pytest.approx(0.0)


# ---------------------------------------------------------------- model selection

#: a run whose best validation round (4) is not its last (5)
SELECT = [
    "lodo.targets=[hospital_2]",
    "train.rounds=5",
    "train.batch_size=8",
    "partition.validation=0.3",
    "evaluation.target_sensitivity=0.9",
]
#: fields of an eval line that are not metrics
LABELS = {"method", "target", "seed", "kind", "round", "split", "domain"}


def lines_of(run_dir: Path, kind: str) -> list[dict]:
    lines = [
        json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()
    ]
    return [r for r in lines if r["kind"] == kind]


def with_target_labels_flipped(ds: DomainDataset, target: str) -> DomainDataset:
    labels = np.where(ds.domain_of == target, 1 - ds.labels, ds.labels)
    return DomainDataset(
        ds.name,
        ds.store,
        ds.classes,
        labels,
        ds.domain_of,
        ds.slide_of,
        ds.is_test,
        ds.domains,
    )


def test_default_run_has_no_selection_and_equals_validation_zero(
    tmp_path: Path,
) -> None:
    """partition.validation=0 (the default) changes nothing: the same weights, the
    same records, no validation lines, no selected/calibrated blocks."""
    over = ["lodo.targets=[hospital_2]"]
    dirs = []
    for sub, extra in (("default", []), ("zero", ["partition.validation=0"])):
        cfg = load_config(None, tiny_overrides(tmp_path / sub, *over, *extra))
        run_experiment(cfg)
        dirs.append(run_dir_for(cfg, "hospital_2", 0))
    a, b = dirs
    wa, wb = final_weights(a), final_weights(b)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert eval_lines(a) == eval_lines(b)
    assert {r["split"] for r in eval_lines(a)} == {"target", "source"}
    assert not lines_of(a, "selection")
    fa, fb = (json.loads((d / "final.json").read_text()) for d in dirs)
    assert fa["evaluation"] == fb["evaluation"]
    zero = tiny_overrides(tmp_path, *over, "partition.validation=0")
    assert load_config(None, zero).hash() == load_config(None, zero[:-1]).hash()
    assert set(fa["evaluation"]) == {
        "target",
        "source",
        "source_worst",
        "source_mean_accuracy",
    }
    meta = read_model_file(a / "model.fpm")[0]
    assert (meta.round, meta.selection) == (2, "last")
    assert meta.temperature is None and meta.threshold is None
    ckpt = torch.load(a / "checkpoint.pt", weights_only=True)
    assert "selected" not in ckpt
    with pytest.raises(ConfigError, match="--select selected: run .* no selected"):
        collect_rows([a], "target", "selected")


def test_selection_picks_the_best_validation_round_and_ignores_the_target(
    tmp_path: Path,
) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path / "a", *SELECT))
    ds = load_dataset(cfg.data)
    rec = run_experiment(cfg, dataset=ds)[0]["evaluation"]
    run_dir = run_dir_for(cfg, "hospital_2", 0)
    # every round: each source client's validation slides, then their mean
    by_round: dict[int, list[float]] = {}
    for r in eval_lines(run_dir):
        if r["split"] == "validation":
            by_round.setdefault(r["round"], []).append(r["balanced_accuracy"])
    assert sorted(by_round) == [1, 2, 3, 4, 5]
    means = {r: float(np.mean(v)) for r, v in by_round.items()}
    selection = lines_of(run_dir, "selection")
    assert [s["validation"] for s in selection] == pytest.approx(list(means.values()))
    best = max(means, key=lambda r: (means[r], -r))  # ties: the earlier round
    sel = rec["selected"]
    assert sel["round"] == best == selection[-1]["best_round"]
    assert sel["metric"] == "balanced_accuracy"
    assert sel["validation"] == pytest.approx(means[best])
    # the selected target metrics are those of that round's global model
    (at_best,) = [
        r for r in eval_lines(run_dir) if r["split"] == "target" and r["round"] == best
    ]
    assert sel["target"] == {k: v for k, v in at_best.items() if k not in LABELS}
    # the last round's keys stay as they were
    (last,) = [
        r for r in eval_lines(run_dir) if r["split"] == "target" and r["round"] == 5
    ]
    assert rec["target"] == {k: v for k, v in last.items() if k not in LABELS}
    # temperature scaling lowers the validation NLL; the operating point meets
    # its sensitivity on the validation slides
    for block in (rec, sel):
        val = block["calibrated"]["validation"]
        assert val["nll"] <= val["nll_uncalibrated"]
        assert block["operating_point"]["validation"]["sensitivity"] >= 0.9
        cal = block["calibrated"]["target"]
        assert cal["accuracy"] == block.get("target", rec["target"])["accuracy"]

    # tables: the last round's metrics by default, the selected round's on request
    (row,) = collect_rows([tmp_path / "a"], "target", "selected")
    assert row.metrics == sel["target"]
    assert collect_rows([tmp_path / "a"])[0].metrics == rec["target"]
    with pytest.raises(ConfigError, match="only --split target"):
        collect_rows([tmp_path / "a"], "source_mean", "selected")
    argv = ["table", str(tmp_path / "a"), "--select", "selected", "--format", "csv"]
    assert main([*argv, "--metric", "balanced_accuracy"]) == 0

    # the same run with the target's labels flipped chooses exactly the same
    flipped_cfg = load_config(None, tiny_overrides(tmp_path / "b", *SELECT))
    flipped = with_target_labels_flipped(ds, "hospital_2")
    other = run_experiment(flipped_cfg, dataset=flipped)[0]["evaluation"]
    assert other["target"]["accuracy"] != rec["target"]["accuracy"]
    assert other["selected"]["round"] == sel["round"]
    assert other["selected"]["validation"] == sel["validation"]
    for key in ("calibrated", "operating_point"):
        for block, ref in ((other, rec), (other["selected"], sel)):
            assert block[key]["validation"] == ref[key]["validation"]
    assert other["calibrated"]["temperature"] == rec["calibrated"]["temperature"]
    assert other["operating_point"]["threshold"] == rec["operating_point"]["threshold"]


def test_resume_with_selection_equals_the_uninterrupted_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    over = [*SELECT, "runtime.export=selected"]
    full_cfg = load_config(None, tiny_overrides(tmp_path / "full", *over))
    run_experiment(full_cfg)
    full_dir = run_dir_for(full_cfg, "hospital_2", 0)

    cfg = load_config(None, tiny_overrides(tmp_path / "crash", *over))
    original = InProcessRun.run_round

    def crash_in_round_3(self: InProcessRun, rnd: int) -> dict:
        if rnd == 3:
            self.evaluate(rnd)  # records (and a new best) of a round never saved
            raise KeyboardInterrupt
        return original(self, rnd)

    monkeypatch.setattr(InProcessRun, "run_round", crash_in_round_3)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg)
    crash_dir = run_dir_for(cfg, "hospital_2", 0)
    saved = torch.load(crash_dir / "checkpoint.pt", weights_only=True)
    early = [s for s in lines_of(full_dir, "selection") if s["round"] <= 2]
    assert saved["selected"]["scalars"]["round"] == early[-1]["best_round"]
    monkeypatch.setattr(InProcessRun, "run_round", original)
    run_experiment(cfg, resume=True)

    wa, wb = final_weights(full_dir), final_weights(crash_dir)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert eval_lines(full_dir) == eval_lines(crash_dir)
    assert lines_of(full_dir, "selection") == lines_of(crash_dir, "selection")
    fa, fb = (json.loads((d / "final.json").read_text()) for d in (full_dir, crash_dir))
    assert fa["evaluation"] == fb["evaluation"]
    meta = read_model_file(crash_dir / "model.fpm")[0]
    assert meta.round == fb["evaluation"]["selected"]["round"]
    assert meta.selection == "selected"


def three_classes(ds: DomainDataset) -> DomainDataset:
    labels = np.where(np.arange(len(ds.labels)) % 5 == 0, 2, ds.labels)
    return DomainDataset(
        "three",
        ds.store,
        [*ds.classes, "other"],
        labels,
        ds.domain_of,
        ds.slide_of,
        ds.is_test,
        ds.domains,
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["evaluation.target_sensitivity=0.9"],
            r"'evaluation.target_sensitivity': expected null for a task with 3 "
            r"classes",
        ),
        (
            ["evaluation.select_metric=f1"],
            r"'evaluation.select_metric': 'f1' is a two-class metric",
        ),
    ],
)
def test_two_class_options_on_three_classes_name_the_key(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    cfg = load_config(
        None, tiny_overrides(tmp_path, "partition.validation=0.3", *extra)
    )
    ds = three_classes(load_dataset(cfg.data))
    fold = lodo_plan(ds, ["hospital_2"])[0]
    with pytest.raises(ConfigError, match=message):
        InProcessRun(cfg, ds, fold, 0, tmp_path / "run")


def test_validation_without_slides_to_hold_out_names_the_key(tmp_path: Path) -> None:
    cfg = load_config(
        None,
        tiny_overrides(
            tmp_path, "partition.validation=0.3", "data.params.slides_per_hospital=1"
        ),
    )
    ds = load_dataset(cfg.data)
    with pytest.raises(ConfigError, match="'partition.validation': 0.3 held out no"):
        InProcessRun(cfg, ds, lodo_plan(ds, ["hospital_2"])[0], 0, tmp_path / "r")
