"""What every task shares (:mod:`fedpath.tasks.base`) and the task of each
data kind (:func:`fedpath.tasks.make_task`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from fedpath.config import ExperimentConfig, load_config
from fedpath.evaluation.metrics import classification_metrics
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks import BagTask, TaskMismatch, make_task
from tests.conftest import tiny_overrides


def test_tasks_pick_by_data_kind_and_refuse_the_other_kind(tmp_path: Path) -> None:
    from tests.mil_helpers import TINY as BAGS

    images = load_config(None, tiny_overrides(tmp_path))
    bags = load_config(None, [*BAGS, "algorithm.name=local_mil"])
    bag_task_ds = load_dataset(bags.data)
    bag_task = make_task(bags, bag_task_ds)
    assert isinstance(bag_task, BagTask) and bag_task.bags() is bag_task
    with pytest.raises(TaskMismatch, match="trains on images, but dataset"):
        bag_task.images()
    with pytest.raises(TaskMismatch, match="algorithms for bags: .*fedhd"):
        make_task(load_config(None, [*BAGS, "algorithm.name=fedavg"]), bag_task_ds)
    with pytest.raises(TaskMismatch, match="algorithms for images: .*fedavg"):
        make_task(
            load_config(None, tiny_overrides(tmp_path, "algorithm.name=fedhd")),
            load_dataset(images.data),
        )
    with pytest.raises(Exception, match="linear_probe' needs an image dataset"):
        bag_task.encode(
            bag_task.build_model(), load_dataset(bags.data).split("hospital_0", "test")
        )


def test_task_evaluate_equals_metrics_of_predict(tmp_path: Path) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path))
    ds = load_dataset(cfg.data)
    task = make_task(cfg, ds)
    split = ds.split(ds.domains[1], "test")
    model = task.build_model()
    probs = task.predict(model, split)
    assert probs.dtype == np.float64 and probs.shape == (len(split), ds.num_classes)
    expected = {**classification_metrics(split.labels, probs), "n": len(split)}
    got = task.evaluate(model, split)
    assert set(got) == set(expected)
    for k, v in expected.items():
        assert got[k] == v or (
            isinstance(v, float) and math.isnan(v) and math.isnan(got[k])
        )


def test_class_weight_formula(tmp_path: Path) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path, "train.class_weights=balanced"))
    task = make_task(cfg, load_dataset(cfg.data))
    w = task.class_weight(np.array([0, 0, 0, 1]))
    assert w is not None
    assert w.tolist() == pytest.approx([4 / (2 * 3), 4 / (2 * 1)])
    w = task.class_weight(np.array([1, 1]))
    assert w is not None
    assert w.tolist() == pytest.approx([0.0, 2 / (2 * 2)])


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
