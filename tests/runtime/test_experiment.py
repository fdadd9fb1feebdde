"""Experiments and their finished runs: :mod:`fedpath.runtime.experiment`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import fedpath.runtime.experiment as experiment
from fedpath.config import ConfigError, load_config
from fedpath.runtime.experiment import (
    collect_rows,
    find_runs,
    load_dataset,
    plan_runs,
    run_dir_for,
    run_experiment,
    splits_of,
)
from fedpath.utils.progress import Reporter
from tests.conftest import tiny_overrides

EVALUATION: dict[str, Any] = {
    "target": {"accuracy": 0.7, "auroc": 0.8},
    "source": {"h0": {"accuracy": 0.9}, "h1": {"accuracy": 0.5}},
    "source_worst": {"domain": "h1", "accuracy": 0.5},
    "source_mean_accuracy": 0.7,
    "selected": {"target": {"accuracy": 0.75}, "round": 1},
}


def _final(run: Path, evaluation: dict[str, Any], **rec: Any) -> Path:
    run.mkdir(parents=True)
    record = {"method": "fedavg", "target": "h2", "seed": 0, **rec}
    (run / "final.json").write_text(json.dumps({**record, "evaluation": evaluation}))
    return run


def test_run_directories_follow_the_documented_layout(tmp_path: Path) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path, "name=exp", "label=mine"))
    assert run_dir_for(cfg, "a/b", 3) == tmp_path / "exp" / "mine" / "a_b" / "seed3"


def test_the_plan_is_every_fold_times_every_seed_fold_first(tmp_path: Path) -> None:
    over = ["lodo.targets=[hospital_2,hospital_0]", "seeds=[4,5]"]
    cfg = load_config(None, tiny_overrides(tmp_path, *over))
    ds = load_dataset(cfg.data)
    assert list(ds.domains) == ["hospital_0", "hospital_1", "hospital_2"]
    plan = [(f.target, sorted(f.sources), s) for f, s in plan_runs(cfg, ds)]
    assert plan == [
        ("hospital_2", ["hospital_0", "hospital_1"], 4),
        ("hospital_2", ["hospital_0", "hospital_1"], 5),
        ("hospital_0", ["hospital_1", "hospital_2"], 4),
        ("hospital_0", ["hospital_1", "hospital_2"], 5),
    ]


def test_a_probe_on_two_unseen_hospitals_end_to_end(tmp_path: Path) -> None:
    """FedAD Sec. 5.3.2 (``evaluation.probe_train``): hospitals 0 and 1 only fit
    the probe, hospital 2 alone trains, hospital 3's test split scores."""
    from tests.ssl_helpers import ssl_cfg

    probe_on = ["hospital_0", "hospital_1"]
    cfg = ssl_cfg(
        tmp_path,
        "fedad",
        "data.params.num_hospitals=4",
        "lodo.targets=[hospital_3]",
        "evaluation.protocol=linear_probe",
        "evaluation.probe_folds=2",
        f"evaluation.probe_train=[{','.join(probe_on)}]",
        "runtime.threads=1",
    )
    ds = load_dataset(cfg.data)
    assert [(f.target, f.sources) for f, _ in plan_runs(cfg, ds)] == [
        ("hospital_3", ["hospital_2"])
    ]
    (record,) = run_experiment(cfg)
    run = run_dir_for(cfg, "hospital_3", 0)
    target = json.loads((run / "final.json").read_text())["evaluation"]["target"]
    assert target == record["evaluation"]["target"]
    assert target["probe_train"] == probe_on
    assert target["n_train"] == sum(len(ds.split(d, "train")) for d in probe_on)
    assert target["n"] == len(ds.split("hospital_3", "test"))
    # no client of the probe's hospitals took part in any stage of training
    traffic = [json.loads(x) for x in (run / "traffic.jsonl").read_text().splitlines()]
    assert traffic and {t["client"].split("/")[0] for t in traffic} == {"hospital_2"}


def test_one_listed_source_trains_alone_end_to_end(tmp_path: Path) -> None:
    """``lodo.sources=[hospital_1]``: hospital_1 alone trains (the local-only
    row), hospital_0 takes no part, hospital_2 is scored as the unseen one."""
    over = ["lodo.targets=[hospital_2]", "lodo.sources=[hospital_1]"]
    cfg = load_config(None, tiny_overrides(tmp_path, *over, "train.rounds=1"))
    ds = load_dataset(cfg.data)
    assert [(f.target, f.sources) for f, _ in plan_runs(cfg, ds)] == [
        ("hospital_2", ["hospital_1"])
    ]
    (record,) = run_experiment(cfg)
    run = run_dir_for(cfg, "hospital_2", 0)
    assert set(record["evaluation"]["source"]) == {"hospital_1"}
    assert record["evaluation"]["target"]["n"] == len(ds.split("hospital_2", "all"))
    traffic = [json.loads(x) for x in (run / "traffic.jsonl").read_text().splitlines()]
    assert traffic and {t["client"].split("/")[0] for t in traffic} == {"hospital_1"}


def test_run_experiment_runs_the_plan_in_order_with_one_config_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    over = ["lodo.targets=[hospital_1,hospital_0]", "seeds=[0,1]"]
    cfg = load_config(None, tiny_overrides(tmp_path, *over))
    made: list[tuple[str, int, Path, str | None]] = []

    class FakeRun:
        def __init__(self, cfg: Any, ds: Any, fold: Any, seed: int, *rest: Any) -> None:
            run_dir, _, config_hash = rest
            made.append((fold.target, seed, run_dir, config_hash))

        def run(self, resume: bool) -> dict[str, Any]:
            return {"n": len(made), "resume": resume}

    class Counting(Reporter):
        total = -1

        def start_runs(self, total: int) -> None:
            self.total = total

    monkeypatch.setattr(experiment, "InProcessRun", FakeRun)
    reporter, before = Counting(), list[Path]()
    records = run_experiment(cfg, reporter, resume=True, before_run=before.append)
    assert records == [{"n": i, "resume": True} for i in (1, 2, 3, 4)]
    assert reporter.total == 4
    expected = [(t, s) for t in ("hospital_1", "hospital_0") for s in (0, 1)]
    assert [(t, s) for t, s, _, _ in made] == expected
    assert [d for _, _, d, _ in made] == [run_dir_for(cfg, t, s) for t, s in expected]
    assert before == [d.absolute() for _, _, d, _ in made]
    assert {h for *_, h in made} == {cfg.hash()}


def test_find_runs_lists_finished_runs_sorted_and_names_a_missing_path(
    tmp_path: Path,
) -> None:
    b = _final(tmp_path / "x" / "b", {})
    a = _final(tmp_path / "x" / "a" / "seed0", {})
    (tmp_path / "x" / "c").mkdir()  # not finished
    assert find_runs([tmp_path]) == [a, b]
    assert find_runs([b, tmp_path / "x" / "a"]) == [b, a]
    with pytest.raises(ConfigError, match="results path .* does not exist"):
        find_runs([tmp_path / "nowhere"])


@pytest.mark.parametrize(
    ("split", "metrics"),
    [
        ("target", {"accuracy": 0.7, "auroc": 0.8}),
        ("source_mean", {"accuracy": 0.7}),
        ("source_worst", {"accuracy": 0.5}),
    ],
)
def test_collect_rows_reads_each_split_of_the_final_record(
    tmp_path: Path, split: str, metrics: dict[str, float]
) -> None:
    _final(tmp_path / "r", EVALUATION, seed="3")
    (row,) = collect_rows([tmp_path], split)
    assert (row.method, row.target, row.seed) == ("fedavg", "h2", 3)
    assert dict(row.metrics) == metrics


def test_collect_rows_per_client_and_of_the_selected_round(tmp_path: Path) -> None:
    clients = {"c0": {"accuracy": 0.25}, "c1": {"accuracy": 0.5}}
    _final(tmp_path / "r", {**EVALUATION, "clients": clients})
    rows = collect_rows([tmp_path], "clients")
    assert [(r.target, dict(r.metrics)) for r in rows] == list(clients.items())
    (sel,) = collect_rows([tmp_path], "target", "selected")
    assert dict(sel.metrics) == {"accuracy": 0.75}


def test_collect_rows_names_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="select: expected 'last', 'selected'"):
        collect_rows([tmp_path], select="best")
    with pytest.raises(ConfigError, match="split: expected 'target', 'clients'"):
        collect_rows([tmp_path], split="test")
    with pytest.raises(ConfigError, match="only --split target .or adapted, valid"):
        collect_rows([tmp_path], "source_mean", "selected")
    with pytest.raises(ConfigError, match="no finished runs"):
        collect_rows([tmp_path])
    _final(tmp_path / "r", EVALUATION)
    with pytest.raises(ConfigError, match=r"evaluation.swa_from=0\); use --select"):
        collect_rows([tmp_path], "target", "averaged")
    with pytest.raises(ConfigError, match="use --split target$"):
        collect_rows([tmp_path], "clients")


def test_splits_of_lists_the_splits_some_run_has_in_table_order(
    tmp_path: Path,
) -> None:
    _final(tmp_path / "a", {"target": {"accuracy": 1.0}})
    assert splits_of([tmp_path]) == ["target"]
    adapted = {"adapted": {"target": {"accuracy": 1.0}}}
    _final(tmp_path / "b", {"clients": {"c0": {}}, **EVALUATION, **adapted})
    assert splits_of([tmp_path]) == [
        "target",
        "clients",
        "source_mean",
        "source_worst",
        "adapted",
    ]
    with pytest.raises(ConfigError, match="these runs recorded no metrics"):
        collect_rows([_final(tmp_path / "c", {})])
