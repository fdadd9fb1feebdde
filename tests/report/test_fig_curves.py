"""Per-round curves (fedpath.report.fig_curves) from results.jsonl and
traffic.jsonl only: averaged per round over a method's runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedpath.report.fig_curves import collect_curves, plot_curves
from fedpath.report.runs import Run


def _run(tmp_path: Path, name: str, method: str, records: list[dict]) -> Run:
    d = tmp_path / name
    d.mkdir()
    return Run(d, {"algorithm": {"name": method}}, None, records)


def test_curves_average_a_methods_runs_per_round(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", "fedavg", [
        {"kind": "round", "round": 1, "fit/loss": 2.0, "fit/lr": 0.1,
         "fit/supcon": 0.5, "bytes_up": 100, "flag": True},
        {"kind": "eval", "round": 1, "split": "target", "accuracy": 0.5},
        {"kind": "eval", "round": 1, "split": "source", "accuracy": 0.6},
        {"kind": "eval", "round": 1, "split": "source", "accuracy": 0.8},
    ])  # fmt: skip
    b = _run(tmp_path, "b", "fedavg", [
        {"kind": "round", "round": 1, "fit/loss": 4.0},
        {"kind": "eval", "round": 1, "split": "target", "accuracy": 0.7},
        {"kind": "eval", "round": 1, "split": "source", "accuracy": 0.9},
    ])  # fmt: skip
    traffic = {"round": 1, "stage": "fit", "client": "c0", "received": []}
    traffic["sent"] = [["w", "x", "f4", [2], 8]]
    (b.path / "traffic.jsonl").write_text(json.dumps(traffic) + "\n")
    curves = collect_curves([a, b])["fedavg"]
    assert curves["loss"] == [(1, 3.0)]
    assert curves["lr"] == [(1, 0.1)] and curves["component:supcon"] == [(1, 0.5)]
    [(target_round, target_acc)] = curves["target:accuracy"]
    assert target_round == 1 and target_acc == pytest.approx(0.6)
    # sources: averaged over domains within a run (0.7, 0.9), then over runs
    [(source_round, source_acc)] = curves["source:accuracy"]
    assert source_round == 1 and source_acc == pytest.approx(0.8)
    assert curves["bytes_up"] == [(1, 100.0)] and curves["up:c0"] == [(1, 8.0)]
    assert not any(k.startswith("component:lr") or "flag" in k for k in curves)


def test_a_figure_only_where_something_was_logged(tmp_path: Path) -> None:
    assert plot_curves({}) is None
    run = _run(
        tmp_path, "a", "fedavg", [{"kind": "round", "round": 1, "fit/loss": 1.0}]
    )
    png = plot_curves(collect_curves([run]), title="t")
    assert png is not None and png.startswith(b"\x89PNG")
