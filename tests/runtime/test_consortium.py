"""Consortium mode: every hospital trains, the validation slides decide
(fedpath/runtime/consortium.py, docs/ship.md)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from fedpath.artifact import read_model_file
from fedpath.cli import main
from fedpath.config import ConfigError, ExperimentConfig, load_config
from fedpath.runtime.consortium import (
    check_consortium_validation,
    over_hospitals,
    recipe,
    transferred_point,
    validation_split,
)
from fedpath.runtime.experiment import collect_rows, run_dir_for, run_experiment
from tests.conftest import tiny_overrides

#: a consortium of the three tiny hospitals with validation and an operating point
CONSORTIUM = (
    "lodo.targets=none",
    "partition.validation=0.3",
    "evaluation.target_sensitivity=0.9",
    "runtime.export=selected",
)
#: the same recipe, leave-one-hospital-out
LOO = CONSORTIUM[1:]


def consortium(tmp: Path, *extra: str) -> ExperimentConfig:
    return load_config(None, tiny_overrides(tmp, *CONSORTIUM, *extra))


def final_of(cfg: ExperimentConfig) -> dict[str, Any]:
    path = run_dir_for(cfg, "none", 0) / "final.json"
    return dict(json.loads(path.read_text()))


def test_consortium_config_needs_validation_with_the_classifier(
    tmp_path: Path,
) -> None:
    cfg = consortium(tmp_path)  # refused before: targets none wanted 'local'
    assert cfg.lodo.targets == "none" and cfg.evaluation.protocol == "classifier"
    with pytest.raises(ConfigError, match="evaluation.protocol"):
        load_config(None, tiny_overrides(tmp_path, "lodo.targets=none"))


def test_consortium_run_selects_calibrates_and_exports_on_validation(
    tmp_path: Path,
) -> None:
    cfg = consortium(tmp_path)
    run_experiment(cfg)  # crashed before: no target split to evaluate
    ev = final_of(cfg)["evaluation"]
    assert "target" not in ev and "target" not in ev["selected"]
    assert set(ev["validation"]["clients"]) == {
        "hospital_0/c0",
        "hospital_1/c0",
        "hospital_2/c0",
    }
    chosen = ev["selected"]
    assert chosen["operating_point"]["validation"]["sensitivity"] >= 0.9
    assert "target" not in chosen["calibrated"]
    meta, _ = read_model_file(run_dir_for(cfg, "none", 0) / "model.fpm")
    assert meta.held_out == "none"
    assert meta.trained_on == ["hospital_0", "hospital_1", "hospital_2"]
    assert meta.round == chosen["round"] and meta.selection == "selected"
    assert meta.temperature == chosen["calibrated"]["temperature"]
    assert meta.threshold == chosen["operating_point"]["threshold"]
    assert meta.validation["ece"] == chosen["calibrated"]["validation"]["ece"]
    assert meta.validation["value"] == chosen["validation"]
    assert meta.expected == {}
    # the table's consortium row: the mean of the clients' validation metrics
    (row,) = collect_rows([tmp_path], "validation")
    assert row.target == "consortium"
    clients = ev["validation"]["clients"].values()
    assert row.metrics["accuracy"] == pytest.approx(
        np.mean([m["accuracy"] for m in clients])
    )
    (picked,) = collect_rows([tmp_path], "validation", "selected")
    assert picked.metrics == {"balanced_accuracy": chosen["validation"]}


def test_table_of_a_consortium_run_defaults_to_its_validation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_experiment(consortium(tmp_path, "train.rounds=1"))
    assert main(["table", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "validation slides" in out and "consortium" in out


def test_a_hospital_without_a_validation_slide_names_the_key(
    tmp_path: Path,
) -> None:
    # hospital b has one training slide: nothing of it could be held out
    clients: Any = [
        SimpleNamespace(client_id=cid, domain=cid[0]) for cid in ("a/c0", "b/c0")
    ]
    splits: Any = {"a/c0": object()}
    cfg = consortium(tmp_path)
    with pytest.raises(ConfigError, match=r"'partition.validation': 0.3 leaves 'b'"):
        check_consortium_validation(cfg, clients, splits)
    # leave-one-out runs keep today's rule: a source without slides is left out
    loo = load_config(None, tiny_overrides(tmp_path, *LOO))
    check_consortium_validation(loo, clients, splits)


def test_a_consortium_of_one_slide_hospitals_fails_before_training(
    tmp_path: Path,
) -> None:
    cfg = consortium(tmp_path, "data.params.slides_per_hospital=1")
    with pytest.raises(ConfigError, match="leaves .hospital_0"):
        run_experiment(cfg)
    assert not (run_dir_for(cfg, "none", 0) / "results.jsonl").exists()


@pytest.mark.parametrize(
    ("name", "message"),
    [("mitosis", "'mitosis' is not a class"), ("normal", "'normal' is listed first")],
)
def test_an_operating_point_for_a_class_the_model_lacks_names_the_key(
    tmp_path: Path, name: str, message: str
) -> None:
    cfg = consortium(tmp_path, f"evaluation.positive_class={name}")
    with pytest.raises(ConfigError, match=f"evaluation.positive_class.*{message}"):
        run_experiment(cfg)


def test_the_leave_one_out_estimate_travels_in_the_model_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loo = load_config(
        None, tiny_overrides(tmp_path / "loo", *LOO, "train.rounds=1", "name=loo")
    )
    run_experiment(loo)
    figures = {
        t: final_of_run(run_dir_for(loo, t, 0))["selected"]["target"][
            "balanced_accuracy"
        ]
        for t in ("hospital_0", "hospital_1", "hospital_2")
    }
    cfg = consortium(
        tmp_path / "cons", "train.rounds=1", f"evaluation.expected=[{tmp_path}/loo]"
    )
    run_experiment(cfg)
    model = run_dir_for(cfg, "none", 0) / "model.fpm"
    expected = read_model_file(model)[0].expected
    assert expected["per_hospital"] == figures
    assert expected["mean"] == pytest.approx(np.mean(list(figures.values())))
    assert (expected["min"], expected["max"]) == (
        min(figures.values()),
        max(figures.values()),
    )
    assert expected["config_hash"] == [loo.hash()] and expected["hospitals"] == 3
    capsys.readouterr()
    assert (
        main(["evaluate", str(model), "synthetic:hospital_0", "--bootstrap", "0"]) == 0
    )
    out = " ".join(capsys.readouterr().out.split())
    lo, hi = min(figures.values()), max(figures.values())
    assert (
        f"expected at a new site from leave-one-hospital-out: "
        f"{expected['mean']:.4f} [{lo:.4f}, {hi:.4f}] over 3 hospitals"
    ) in out
    # the operating point the leave-one-out runs chose on their validation
    # slides, scored at their held-out hospital, travels beside it
    held = {
        t: final_of_run(run_dir_for(loo, t, 0))["selected"]["operating_point"][
            "target"
        ]["sensitivity"]
        for t in figures
    }
    point = expected["operating_point"]
    assert point["target_sensitivity"] == 0.9
    assert point["sensitivity"]["per_hospital"] == held
    assert point["sensitivity"]["mean"] == pytest.approx(np.mean(list(held.values())))
    assert "sensitivity on validation): sensitivity measured here" in out
    assert f"expected {point['specificity']['mean']:.4f}" in out


def test_leave_one_out_runs_without_an_operating_point_still_estimate(
    tmp_path: Path,
) -> None:
    """The threshold is chosen after training: runs that chose none (or one for
    another sensitivity) are the same recipe, and the file carries their
    balanced accuracy without an operating point."""
    bare = [o for o in LOO if not o.startswith("evaluation.target_sensitivity")]
    for name, extra in (("none", []), ("other", ["evaluation.target_sensitivity=0.5"])):
        loo = load_config(
            None, tiny_overrides(tmp_path / name, *bare, *extra, "train.rounds=1")
        )
        run_experiment(loo)
        cfg = consortium(
            tmp_path / f"c_{name}",
            "train.rounds=1",
            f"evaluation.expected=[{tmp_path}/{name}]",
        )
        run_experiment(cfg)
        model = run_dir_for(cfg, "none", 0) / "model.fpm"
        expected = read_model_file(model)[0].expected
        assert expected["hospitals"] == 3 and "operating_point" not in expected


def final_of_run(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / "final.json").read_text())["evaluation"])


def test_the_estimate_of_another_recipe_is_refused(tmp_path: Path) -> None:
    loo = load_config(None, tiny_overrides(tmp_path / "loo", *LOO, "train.rounds=1"))
    run_experiment(loo)
    cfg = consortium(tmp_path / "c", f"evaluation.expected=[{tmp_path}/loo]")
    with pytest.raises(ConfigError, match=r"another recipe \(differs in train.rounds"):
        run_experiment(cfg)
    lone = load_config(None, tiny_overrides(tmp_path, *LOO, "evaluation.expected=[x]"))
    with pytest.raises(ConfigError, match="only for a consortium run"):
        run_experiment(lone)


def test_the_recipe_ignores_where_and_what_is_held_out(tmp_path: Path) -> None:
    a = consortium(tmp_path / "a", "name=a", "seeds=[1,2]")
    b = load_config(None, tiny_overrides(tmp_path / "b", *LOO))
    assert recipe(a) == recipe(b)
    # an extra score with the held-out domain's BatchNorm does not change the model
    adapted = load_config(
        None, tiny_overrides(tmp_path / "c", *LOO, "evaluation.adapt_bn=true")
    )
    assert recipe(adapted) == recipe(a)
    # nor does the operating point: a threshold chosen after training
    bare = [o for o in LOO if not o.startswith("evaluation.target_sensitivity")]
    assert len(bare) == len(LOO) - 1
    no_point = load_config(None, tiny_overrides(tmp_path / "d", *bare))
    assert recipe(no_point) == recipe(a)
    assert recipe(a) != recipe(consortium(tmp_path, "train.lr=0.5"))
    # which hospitals train is the recipe (a local-only run is another one)
    assert recipe(a) != recipe(consortium(tmp_path, "lodo.sources=[hospital_0]"))


def test_which_rounds_are_scored_is_recipe_only_when_a_round_is_selected(
    tmp_path: Path,
) -> None:
    """Scoring every round or only the last leaves the last round's weights
    and their scores unchanged, so ``train.eval_every`` is no part of the
    recipe of a run that exports them; it is when the export picks a round."""
    base = ("lodo.targets=[hospital_0]", "train.rounds=3", "runtime.export=last")
    runs = []
    for every in (1, 3):
        cfg = load_config(
            None,
            tiny_overrides(tmp_path / f"e{every}", *base, f"train.eval_every={every}"),
        )
        run_experiment(cfg)
        weights = read_model_file(run_dir_for(cfg, "hospital_0", 0) / "model.fpm")[1]
        scores = final_of_run(run_dir_for(cfg, "hospital_0", 0))["target"]
        runs.append((cfg, weights, scores))
    (a, wa, sa), (b, wb, sb) = runs
    assert wa.keys() == wb.keys() and all(
        np.array_equal(wa[k].numpy(), wb[k].numpy()) for k in wa
    )
    assert sa == sb
    assert recipe(a) == recipe(b)
    chosen = [
        load_config(None, tiny_overrides(tmp_path, *LOO, f"train.eval_every={e}"))
        for e in (1, 3)
    ]
    assert recipe(chosen[0]) != recipe(chosen[1])


def test_validation_split_of_a_run_without_validation_is_none() -> None:
    assert validation_split({"target": {"accuracy": 1.0}}) is None


def test_figures_over_hospitals_average_seeds_first_then_hospitals() -> None:
    out = over_hospitals({"B": [0.6, 0.8, 0.7], "A": [0.5]})
    assert list(out["per_hospital"]) == ["A", "B"]
    assert out["per_hospital"]["B"] == pytest.approx(0.7)
    # the mean over hospitals, not over runs (that would be 0.65)
    assert out["mean"] == pytest.approx(0.6)
    assert (out["min"], out["max"]) == (pytest.approx(0.5), pytest.approx(0.7))


def test_a_transferred_point_splits_sensitivity_and_specificity() -> None:
    out = transferred_point(0.9, {"A": [(1.0, 0.5), (0.8, 0.7)], "B": [(0.6, 0.9)]})
    assert out["target_sensitivity"] == 0.9
    assert out["sensitivity"]["per_hospital"] == {"A": pytest.approx(0.9), "B": 0.6}
    assert out["specificity"]["per_hospital"] == {"A": pytest.approx(0.6), "B": 0.9}
    assert out["sensitivity"]["mean"] == pytest.approx(0.75)
    assert out["specificity"]["min"] == pytest.approx(0.6)
