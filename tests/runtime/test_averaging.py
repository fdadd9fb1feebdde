"""evaluation.swa_from: the mean of the global weights across rounds (SWA)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.artifact import read_model_file
from fedpath.config import ConfigError, load_config
from fedpath.data.partition import lodo_plan
from fedpath.report import write_report
from fedpath.runtime.averaging import RoundAverage
from fedpath.runtime.experiment import (
    collect_rows,
    load_dataset,
    run_dir_for,
    run_experiment,
)
from fedpath.runtime.inprocess import InProcessRun
from tests.conftest import tiny_overrides
from tests.report_helpers import table_cells

SWA = [
    "lodo.targets=[hospital_2]",
    "train.rounds=4",
    "train.batch_size=8",
    "evaluation.swa_from=2",
]


def test_running_mean_formula_ints_and_state() -> None:
    gen = np.random.default_rng(0)
    rounds = [
        {"w": gen.normal(size=(3, 2)).astype(np.float32), "n": np.array(r)}
        for r in range(1, 5)
    ]
    avg = RoundAverage(2)
    assert avg.weights(rounds[0]) is None
    for rnd, w in enumerate(rounds, start=1):
        avg.update(rnd, w)
    assert avg.rounds == [2, 3, 4]
    out = avg.weights(rounds[0])
    assert out is not None
    expected = np.mean([r["w"].astype(np.float64) for r in rounds[1:]], axis=0)
    assert out["w"].dtype == np.float32
    np.testing.assert_allclose(out["w"], expected.astype(np.float32), rtol=1e-6)
    assert int(out["n"]) == 4  # an integer array keeps the last round's value
    again = RoundAverage(2)
    again.load_state(avg.state())
    assert again.rounds == avg.rounds
    back = again.weights(rounds[0])
    assert back is not None and all(np.array_equal(back[k], out[k]) for k in out)
    again.load_state(None)
    assert again.weights(rounds[0]) is None
    with pytest.raises(ValueError, match="other arrays"):
        avg.update(5, {"w": rounds[0]["w"]})
    with pytest.raises(ValueError, match=">= 1"):
        RoundAverage(0)


def _recording_run(tmp_path: Path, *extra: str) -> tuple[InProcessRun, list[dict]]:
    cfg = load_config(None, tiny_overrides(tmp_path, *SWA, *extra))
    ds = load_dataset(cfg.data)
    (fold,) = lodo_plan(ds, cfg.lodo.targets)
    run = InProcessRun(cfg, ds, fold, 0, tmp_path / "run")
    seen: list[dict] = []
    original = run.run_round

    def run_round(rnd: int) -> dict:
        out = original(rnd)
        weights = run.server.global_weights()
        assert weights is not None
        seen.append({k: v.copy() for k, v in weights.items()})
        return out

    run.run_round = run_round  # type: ignore[method-assign]
    return run, seen


def test_averaged_block_scores_the_mean_of_rounds_2_to_4(tmp_path: Path) -> None:
    run, seen = _recording_run(tmp_path, "runtime.export=averaged")
    record = run.run()
    block = record["evaluation"]["averaged"]
    assert block["rounds"] == [2, 3, 4]
    mean = {
        k: np.mean([w[k].astype(np.float64) for w in seen[1:]], axis=0).astype(
            seen[-1][k].dtype
        )
        if np.issubdtype(seen[-1][k].dtype, np.floating)
        else seen[-1][k]
        for k in seen[-1]
    }
    # model.fpm holds the mean, not the last round's weights
    meta, exported = read_model_file(tmp_path / "run" / "model.fpm")
    assert meta.selection == "averaged"
    for k, v in mean.items():
        np.testing.assert_allclose(exported[k].numpy(), v, rtol=1e-5, atol=1e-7)
    assert any(not np.allclose(seen[-1][k], mean[k]) for k in mean)
    # its target metrics are those of the mean, and differ from the last round's
    run.evaluator.model.load(mean)
    target = run.evaluator.splits[("target", "hospital_2")]
    expected = run.task.evaluate(run.evaluator.model.module, target)
    assert block["target"]["accuracy"] == pytest.approx(expected["accuracy"])
    assert block["target"]["auroc"] == pytest.approx(expected["auroc"])
    assert block["target"] != record["evaluation"]["target"]
    # tables read it with --select averaged
    (row,) = collect_rows([tmp_path / "run"], "target", "averaged")
    assert row.metrics == block["target"]


def test_the_report_shows_the_averaged_weights(tmp_path: Path) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path, *SWA[:-1], "train.rounds=2",
                                            "evaluation.swa_from=1"))  # fmt: skip
    (record,) = run_experiment(cfg)
    write_report([tmp_path], tmp_path / "report.html", figures=False)
    html = (tmp_path / "report.html").read_text()
    cells = table_cells(html, re.escape("balanced_accuracy (averaged weights)"))
    block = record["evaluation"]["averaged"]
    assert block["rounds"] == [1, 2]
    assert cells[("fedavg", "hospital_2")] == pytest.approx(
        100 * block["target"]["balanced_accuracy"], abs=1e-9
    )


def test_a_table_of_runs_without_averaging_names_the_option(tmp_path: Path) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path, *SWA[:-1], "train.rounds=1"))
    run_experiment(cfg)
    with pytest.raises(ConfigError, match="evaluation.swa_from=0"):
        collect_rows([tmp_path], "target", "averaged")
    with pytest.raises(ConfigError, match="only --split target"):
        collect_rows([tmp_path], "source_mean", "averaged")


def test_validation_and_adapt_bn_give_the_mean_its_own_blocks(tmp_path: Path) -> None:
    extra = ["partition.validation=0.3", "evaluation.adapt_bn=true"]
    run, _ = _recording_run(tmp_path, *extra)
    block = run.run()["evaluation"]["averaged"]
    assert block["calibrated"]["temperature"] > 0
    assert block["adapted"]["n"] > 0
    assert set(block["adapted"]["target"]) >= {"accuracy", "balanced_accuracy"}


def test_resume_averages_exactly_what_an_uninterrupted_run_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full_cfg = load_config(None, tiny_overrides(tmp_path / "full", *SWA))
    run_experiment(full_cfg)
    cfg = load_config(None, tiny_overrides(tmp_path / "crash", *SWA))
    original = InProcessRun.run_round

    def crash_in_round_4(self: InProcessRun, rnd: int) -> dict:
        if rnd == 4:
            raise KeyboardInterrupt
        return original(self, rnd)

    monkeypatch.setattr(InProcessRun, "run_round", crash_in_round_4)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg)
    crash_dir = run_dir_for(cfg, "hospital_2", 0)
    saved = torch.load(crash_dir / "checkpoint.pt", weights_only=True)
    assert saved["averaged"]["scalars"]["count"] == 2  # rounds 2 and 3
    monkeypatch.setattr(InProcessRun, "run_round", original)
    run_experiment(cfg, resume=True)
    full_dir = run_dir_for(full_cfg, "hospital_2", 0)
    fa, fb = (json.loads((d / "final.json").read_text()) for d in (full_dir, crash_dir))
    assert fa["evaluation"]["averaged"] == fb["evaluation"]["averaged"]
