"""Model selection on the sources' validation slides in the in-process runtime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.artifact import read_model_file
from fedpath.cli import main
from fedpath.config import ConfigError, load_config
from fedpath.data.base import DomainDataset
from fedpath.data.partition import lodo_plan
from fedpath.runtime.experiment import (
    collect_rows,
    load_dataset,
    run_dir_for,
    run_experiment,
)
from fedpath.runtime.inprocess import InProcessRun
from tests.conftest import tiny_overrides
from tests.runtime.conftest import eval_lines, final_weights

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
