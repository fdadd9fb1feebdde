"""How a run is judged: :mod:`fedpath.runtime.evaluate`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch
from torch import nn

from fedpath.config import ExperimentConfig, load_config
from fedpath.data.base import DomainDataset, Split
from fedpath.data.partition import LodoFold, lodo_plan
from fedpath.runtime.evaluate import (
    EvalModel,
    eval_splits,
    evaluate_classifier,
    evaluate_probe,
    load_weights,
    summarize_clients,
)
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks import Task
from tests.conftest import tiny_overrides

FOLD = LodoFold("hospital_2", ["hospital_0", "hospital_1"])


def _setup(tmp_path: Path, *extra: str) -> tuple[ExperimentConfig, DomainDataset]:
    cfg = load_config(None, tiny_overrides(tmp_path, *extra))
    return cfg, load_dataset(cfg.data)


def _same(a: Split, b: Split) -> bool:
    return bool(np.array_equal(a.indices, b.indices)) and a.store is b.store


def test_load_weights_takes_the_shared_entries_only() -> None:
    model = nn.Linear(2, 1)
    before_bias = model.bias.detach().clone()
    w = np.arange(2, dtype=np.float32).reshape(1, 2)
    load_weights(model, {"weight": w, "server_only": np.ones(3, np.float32)})
    assert torch.equal(model.weight, torch.from_numpy(w))
    assert torch.equal(model.bias, before_bias)  # not in the weights: kept
    other = np.full((1, 2), 7.0, np.float32)
    ev = EvalModel(model)
    ev.load({"weight": other})
    assert torch.equal(model.weight, torch.from_numpy(other))
    assert ev.module is model


def test_eval_splits_hold_the_target_and_each_source_test_split(
    tmp_path: Path,
) -> None:
    cfg, ds = _setup(tmp_path)
    splits = eval_splits(cfg, ds, FOLD)
    assert list(splits) == [
        ("target", "hospital_2"),
        ("source", "hospital_0"),
        ("source", "hospital_1"),
    ]
    assert _same(splits[("target", "hospital_2")], ds.split("hospital_2", "all"))
    assert _same(splits[("source", "hospital_0")], ds.split("hospital_0", "test"))


def test_eval_splits_follow_the_lodo_keys(tmp_path: Path) -> None:
    cfg, ds = _setup(tmp_path, "lodo.eval_split=test", "lodo.source_eval=false")
    splits = eval_splits(cfg, ds, FOLD)
    assert list(splits) == [("target", "hospital_2")]
    assert _same(splits[("target", "hospital_2")], ds.split("hospital_2", "test"))
    assert eval_splits(cfg, ds, LodoFold("none", list(ds.domains))) == {}


def test_the_linear_probe_trains_on_the_target_train_split(tmp_path: Path) -> None:
    over = ["algorithm.name=fedavg_ssl", "evaluation.protocol=linear_probe"]
    cfg, ds = _setup(tmp_path, *over)
    splits = eval_splits(cfg, ds, FOLD)
    assert list(splits) == [("probe_train", "hospital_2"), ("target", "hospital_2")]
    assert _same(splits[("probe_train", "hospital_2")], ds.split("hospital_2", "train"))
    assert _same(splits[("target", "hospital_2")], ds.split("hospital_2", "test"))


PROBE_ON_TWO = [
    "algorithm.name=fedavg_ssl",
    "evaluation.protocol=linear_probe",
    "data.params.num_hospitals=4",
    "lodo.targets=[hospital_3]",
    "evaluation.probe_train=[hospital_0,hospital_1]",
]


def test_the_probe_trains_on_the_listed_domains_which_do_not_train(
    tmp_path: Path,
) -> None:
    """Sec. 5.3.2: fitted on two hospitals out of the federation, tested on a
    third; the target's own train split is not used."""
    cfg, ds = _setup(tmp_path, *PROBE_ON_TWO)
    (fold,) = lodo_plan(ds, cfg.lodo.targets, cfg.evaluation.probe_train)
    assert fold.sources == ["hospital_2"]  # the only one that trains
    splits = eval_splits(cfg, ds, fold)
    assert list(splits) == [
        ("probe_train", "hospital_0"),
        ("probe_train", "hospital_1"),
        ("target", "hospital_3"),
    ]
    for d in ("hospital_0", "hospital_1"):
        assert _same(splits[("probe_train", d)], ds.split(d, "train"))
    assert _same(splits[("target", "hospital_3")], ds.split("hospital_3", "test"))


class FakeTask:
    """Accuracy per domain from a table; encodes a split as its indices."""

    def __init__(self, accuracy: Mapping[str, float]) -> None:
        self.accuracy = accuracy

    def evaluate(self, model: nn.Module, split: Split) -> dict[str, Any]:
        return {"accuracy": self.accuracy[str(split.domains[0])], "n": len(split)}

    def encode(self, model: nn.Module, split: Split) -> np.ndarray:
        return split.indices.reshape(-1, 1).astype(np.float32)


def test_evaluate_classifier_records_every_split_and_the_worst_source(
    tmp_path: Path,
) -> None:
    cfg, ds = _setup(tmp_path)
    splits = eval_splits(cfg, ds, FOLD)
    task = FakeTask({"hospital_0": 0.9, "hospital_1": 0.6, "hospital_2": 0.75})
    lines: list[tuple[str, str, dict[str, Any]]] = []
    out = evaluate_classifier(
        cast(Task, task),
        nn.Identity(),
        splits,
        lambda k, d, m: lines.append((k, d, dict(m))),
    )
    assert [(k, d) for k, d, _ in lines] == list(splits)
    assert out["target"]["accuracy"] == 0.75
    assert set(out["source"]) == {"hospital_0", "hospital_1"}
    assert out["source_worst"] == {"domain": "hospital_1", "accuracy": 0.6}
    assert out["source_mean_accuracy"] == pytest.approx((0.9 + 0.6) / 2)


def test_evaluate_classifier_without_sources_has_no_source_summary(
    tmp_path: Path,
) -> None:
    cfg, ds = _setup(tmp_path, "lodo.source_eval=false")
    out = evaluate_classifier(
        cast(Task, FakeTask({"hospital_2": 0.5})),
        nn.Identity(),
        eval_splits(cfg, ds, FOLD),
        lambda *a: None,
    )
    assert out == {
        "target": {"accuracy": 0.5, "n": len(ds.split("hospital_2", "all"))},
        "source": {},
    }


def test_evaluate_probe_fits_on_the_frozen_target_features(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedpath.evaluation.probe as probe

    over = ["algorithm.name=fedavg_ssl", "evaluation.protocol=linear_probe"]
    cfg, ds = _setup(tmp_path, *over)
    splits = eval_splits(cfg, ds, FOLD)
    seen: dict[str, Any] = {}

    def fake_probe(*args: Any, **kwargs: Any) -> dict[str, Any]:
        seen.update(args=args, kwargs=kwargs)
        return {"accuracy": 0.5}

    monkeypatch.setattr(probe, "linear_probe", fake_probe)
    lines: list[tuple[str, str]] = []
    out = evaluate_probe(
        cast(Task, FakeTask({})),
        nn.Identity(),
        splits,
        cfg,
        7,
        lambda k, d, m: lines.append((k, d)),
    )
    # probe_train: [] is Sec. 5.5, the metrics as they always were
    assert cfg.evaluation.probe_train == []
    assert out == {"accuracy": 0.5} and lines == [("target", "hospital_2")]
    train, test = ds.split("hospital_2", "train"), ds.split("hospital_2", "test")
    train_x, train_y, test_x, test_y = seen["args"]
    assert np.array_equal(train_x[:, 0], train.indices)
    assert np.array_equal(test_x[:, 0], test.indices)
    assert np.array_equal(train_y, train.labels) and np.array_equal(test_y, test.labels)
    ev = cfg.evaluation
    assert seen["kwargs"] == {
        "folds": ev.probe_folds,
        "max_iter": ev.probe_max_iter,
        "cs": ev.probe_cs,
        "l2": ev.probe_l2,
        "seed": 7,
        "where": "domain 'hospital_2' (lodo target)",
    }


def test_evaluate_probe_fits_on_the_listed_domains_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedpath.evaluation.probe as probe

    cfg, ds = _setup(tmp_path, *PROBE_ON_TWO)
    (fold,) = lodo_plan(ds, cfg.lodo.targets, cfg.evaluation.probe_train)
    seen: dict[str, Any] = {}

    def fake_probe(*args: Any, **kwargs: Any) -> dict[str, Any]:
        seen.update(args=args, kwargs=kwargs)
        return {"accuracy": 0.5}

    monkeypatch.setattr(probe, "linear_probe", fake_probe)
    lines: list[tuple[str, str, dict[str, Any]]] = []
    out = evaluate_probe(
        cast(Task, FakeTask({})),
        nn.Identity(),
        eval_splits(cfg, ds, fold),
        cfg,
        7,
        lambda k, d, m: lines.append((k, d, dict(m))),
    )
    # the protocol is in the metrics: a table can tell the two apart
    assert out == {"accuracy": 0.5, "probe_train": ["hospital_0", "hospital_1"]}
    assert lines == [("target", "hospital_3", out)]
    fit_on = [ds.split(d, "train") for d in ("hospital_0", "hospital_1")]
    test = ds.split("hospital_3", "test")
    train_x, train_y, test_x, test_y = seen["args"]
    # every train feature is a sample of the two listed domains' train splits
    assert len(train_x) == sum(len(s) for s in fit_on)
    assert np.array_equal(train_x[:, 0], np.concatenate([s.indices for s in fit_on]))
    assert set(ds.domain_of[train_x[:, 0].astype(int)]) == {"hospital_0", "hospital_1"}
    assert np.array_equal(train_y, np.concatenate([s.labels for s in fit_on]))
    assert np.array_equal(test_x[:, 0], test.indices)
    assert np.array_equal(test_y, test.labels)
    assert seen["kwargs"]["where"] == (
        "domain 'hospital_3' (lodo target), probe trained on 'hospital_0', 'hospital_1'"
    )


def test_summarize_clients_is_the_unweighted_mean_of_numbers() -> None:
    per = {
        "a": {"accuracy": 0.5, "auroc": 0.75, "n": 10, "name": "x"},
        "b": {"accuracy": 1.0, "auroc": 0.25, "n": 1000, "name": "y"},
    }
    out = summarize_clients(per)
    assert out["clients"] == per
    # not weighted by n; n and strings are no metric
    assert out["clients_mean"] == {"accuracy": 0.75, "auroc": 0.5}
    assert summarize_clients({}) == {}
