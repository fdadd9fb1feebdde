"""The run's evaluation piece: :mod:`fedpath.runtime.evaluator`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from fedpath.config import load_config
from fedpath.data.partition import lodo_plan
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.inprocess import InProcessRun
from fedpath.runtime.results import RunLog
from fedpath.utils.io import read_jsonl
from tests.conftest import tiny_overrides


class Clients:
    """A transport whose clients report fixed metrics (one reports none)."""

    def client_metrics(self, rnd: int) -> dict[str, Mapping[str, Any]]:
        return {"a": {"accuracy": 1.0, "n": 3}, "b": {"accuracy": 0.5, "n": 1}, "c": {}}

    def validation_metrics(self, rnd: int, weights: Any) -> Any:
        raise AssertionError("no validation in these runs")


def _run(tmp_path: Path, *extra: str) -> InProcessRun:
    cfg = load_config(None, tiny_overrides(tmp_path, *extra))
    ds = load_dataset(cfg.data)
    return InProcessRun(cfg, ds, lodo_plan(ds, ["hospital_0"])[0], 0, tmp_path / "r")


def test_evaluation_rounds(tmp_path: Path) -> None:
    run = _run(tmp_path, "train.rounds=5", "train.eval_every=2")
    assert [r for r in range(1, 6) if run.evaluator.due(r)] == [2, 4, 5]


def test_target_and_sources_are_scored_and_recorded(tmp_path: Path) -> None:
    run = _run(tmp_path)
    log = RunLog(tmp_path, {"seed": 0})
    ev = run.evaluator
    out = ev.evaluate(1, run.server.global_weights(), Clients(), log)  # type: ignore[arg-type]
    rows = list(read_jsonl(tmp_path / "results.jsonl"))
    assert [(r["split"], r["domain"]) for r in rows] == [
        ("target", "hospital_0"),
        ("source", "hospital_1"),
        ("source", "hospital_2"),
    ]
    drop = {"seed", "kind", "round", "split", "domain"}
    assert out["target"] == {k: v for k, v in rows[0].items() if k not in drop}
    worst = min(rows[1:], key=lambda r: r["accuracy"])
    assert out["source_worst"] == {
        "domain": worst["domain"],
        "accuracy": worst["accuracy"],
    }
    assert ev.last is out


def test_without_global_weights_only_the_clients_count(tmp_path: Path) -> None:
    run = _run(tmp_path, "evaluation.protocol=local")
    log = RunLog(tmp_path, {"seed": 0})
    out = run.evaluator.evaluate(1, None, Clients(), log)  # type: ignore[arg-type]
    rows = list(read_jsonl(tmp_path / "results.jsonl"))
    assert [(r["split"], r["domain"]) for r in rows] == [
        ("client", "a"),
        ("client", "b"),
    ]
    assert out["clients_mean"]["accuracy"] == pytest.approx(0.75)
    assert set(out) == {"clients", "clients_mean"}
    # nothing more at the end without weights
    assert run.evaluator.final(out, None, Clients()) is out  # type: ignore[arg-type]


def test_how_often_a_run_is_scored_leaves_its_training_untouched(
    tmp_path: Path,
) -> None:
    """Scoring (every round, or only the last; with test-time augmentation)
    draws nothing from the training's random streams: the last round's weights
    and scores are the same, so a row may be scored at its last round only."""
    from fedpath.runtime.experiment import run_experiment

    finals = []
    for every in (1, 3):
        out = tmp_path / f"every{every}"
        over = tiny_overrides(
            out,
            "train.rounds=3",
            f"train.eval_every={every}",
            "evaluation.tta=dihedral",
        )
        [rec] = run_experiment(load_config(None, [*over, "lodo.targets=[hospital_0]"]))
        finals.append(rec["evaluation"]["target"])
        rows = [r for r in read_jsonl(next(out.rglob("results.jsonl"))) if "split" in r]
        assert sorted({r["round"] for r in rows}) == ([1, 2, 3] if every == 1 else [3])
    assert finals[0] == finals[1]
