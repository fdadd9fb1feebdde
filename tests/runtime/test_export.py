"""What a finished run exports: :mod:`fedpath.runtime.export`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpath.artifact import read_model_file
from fedpath.config import load_config
from fedpath.data.partition import lodo_plan
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.export import data_provenance, export_global
from fedpath.runtime.inprocess import InProcessRun
from tests.conftest import tiny_overrides


def _run(tmp_path: Path, *extra: str) -> InProcessRun:
    cfg = load_config(None, tiny_overrides(tmp_path, *extra))
    ds = load_dataset(cfg.data)
    return InProcessRun(cfg, ds, lodo_plan(ds, ["hospital_0"])[0], 0, tmp_path / "r")


def test_the_selected_round_is_exported_with_its_decision(tmp_path: Path) -> None:
    run = _run(
        tmp_path,
        "train.rounds=3",
        "partition.validation=0.3",
        "runtime.export=selected",
    )
    record = run.run()
    selected = record["evaluation"]["selected"]
    meta, exported = read_model_file(tmp_path / "r" / "model.fpm")
    assert (meta.selection, meta.round) == ("selected", selected["round"])
    assert meta.temperature == selected["calibrated"]["temperature"]
    assert meta.config_hash == record["config_hash"] == run.config_hash
    assert meta.trained_on == ["hospital_1", "hospital_2"]
    assert meta.held_out == "hospital_0"
    assert meta.data == data_provenance(run.cfg)
    assert run.evaluator.selector is not None and run.evaluator.selector.best
    best = run.evaluator.selector.best.weights
    for key, value in exported.items():
        np.testing.assert_array_equal(value.numpy(), best[key])


def test_no_weights_no_model_file(tmp_path: Path) -> None:
    run = _run(tmp_path)
    (tmp_path / "r").mkdir()
    args = (tmp_path / "r", run.cfg, run.config_hash, run.fold, run.seed)
    export_global(*args, run.evaluator, None, {})
    assert not (tmp_path / "r" / "model.fpm").exists()
    export_global(*args, run.evaluator, run.server.global_weights(), {})
    meta, _ = read_model_file(tmp_path / "r" / "model.fpm")
    assert (meta.selection, meta.round, meta.temperature) == ("last", 2, None)
