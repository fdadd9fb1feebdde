"""Experiment tracking (``runtime.tracking``): what TensorBoard and MLflow hold, read
back from their local stores, equals ``results.jsonl``, round by round, once per
round, also across a crash and ``--resume``."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedpath.config import ConfigError, ExperimentConfig, load_config
from fedpath.runtime.experiment import run_dir_for, run_experiment
from fedpath.runtime.inprocess import InProcessRun
from fedpath.runtime.tracking import TensorBoardTracker
from fedpath.runtime.tracking_names import MLFLOW_RUN, mlflow_store, scalars
from tests.conftest import tiny_overrides

#: a {metric name: {round: value}} table
Table = dict[str, dict[int, float]]

TARGET = "hospital_1"


def needs(backend: str) -> None:
    """Skip a test whose backend's package is not installed (not in every venv)."""
    module = {"tensorboard": "tensorboard", "mlflow": "mlflow"}[backend]
    pytest.importorskip(module, reason=f"pip install 'fedpath[{backend}]'")


@pytest.fixture(autouse=True)
def _file_store(monkeypatch: pytest.MonkeyPatch) -> None:
    # the reading client needs it as the tracker does (MLflow 3's file store)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")


def tiny(tmp_path: Path, *extra: str) -> ExperimentConfig:
    return load_config(
        None, tiny_overrides(tmp_path, f"lodo.targets=[{TARGET}]", *extra)
    )


def expected(run_dir: Path) -> Table:
    """``results.jsonl``'s numeric fields per tracker name and round; a round
    recorded twice would fail here."""
    table: Table = {}
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        for name, value in scalars(record).items():
            steps = table.setdefault(name, {})
            assert record["round"] not in steps, (name, record["round"])
            steps[record["round"]] = value
    return table


def crash_in_round_2(monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 2 evaluates (its records are appended), then the process dies."""
    original = InProcessRun.run_round

    def run_round(self: InProcessRun, rnd: int) -> dict[str, Any]:
        if rnd == 2:
            self.evaluate(rnd)
            raise KeyboardInterrupt
        return original(self, rnd)

    monkeypatch.setattr(InProcessRun, "run_round", run_round)


def interrupted_then_resumed(
    cfg: ExperimentConfig, monkeypatch: pytest.MonkeyPatch, resumed: ExperimentConfig
) -> Path:
    with monkeypatch.context() as patch:
        crash_in_round_2(patch)
        with pytest.raises(KeyboardInterrupt):
            run_experiment(cfg)
    run_dir = run_dir_for(cfg, TARGET, 0)
    assert not (run_dir / "final.json").exists()
    run_experiment(resumed, resume=True)
    assert (run_dir / "final.json").is_file()
    return run_dir


# ---------------------------------------------------------------- TensorBoard


def tensorboard_table(log_dir: Path) -> Table:
    """The scalars TensorBoard shows (its own reader, every event kept)."""
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {
        tag: {e.step: e.value for e in acc.Scalars(tag)}
        for tag in acc.Tags()["scalars"]
    }


def as_float32(table: Table) -> Table:
    """TensorBoard keeps float32 scalars: ``results.jsonl``'s values, so rounded."""
    return {
        name: {step: float(np.float32(v)) for step, v in steps.items()}
        for name, steps in table.items()
    }


def tensorboard_writes(log_dir: Path) -> Counter[tuple[str, int]]:
    """How often each (scalar, round) was written, over every event file (the
    accumulator would hide a repeated step)."""
    from tensorboard.backend.event_processing.event_file_loader import (
        LegacyEventFileLoader,  # the events as written (no migration to tensors)
    )

    counts: Counter[tuple[str, int]] = Counter()
    for path in sorted(log_dir.glob("events.out.tfevents.*")):
        for event in LegacyEventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.WhichOneof("value") == "simple_value":
                    counts[(value.tag, event.step)] += 1
    return counts


def test_tensorboard_scalars_equal_results(tmp_path: Path) -> None:
    needs("tensorboard")
    cfg = tiny(tmp_path, "runtime.tracking=tensorboard", "partition.validation=0.25")
    run_experiment(cfg)
    run_dir = run_dir_for(cfg, TARGET, 0)
    want = expected(run_dir)
    log_dir = run_dir / "tensorboard"
    table = tensorboard_table(log_dir)
    assert table == as_float32(want)
    assert set(tensorboard_writes(log_dir).values()) == {1}
    # every kind of per-round record, named <kind>[/<split>/<domain>]/<field>
    for name in (
        f"eval/target/{TARGET}/accuracy",
        "eval/source/hospital_0/balanced_accuracy",
        "eval/validation/hospital_0/c0/auroc",
        "round/bytes_up",
        "round/fit/loss",
        "timing/client_s",
        "selection/best_validation",
    ):
        assert set(want[name]) == {1, 2}, name
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    first = next(r for r in records if r["kind"] == "round" and r["round"] == 1)
    assert table["round/bytes_up"][1] == first["bytes_up"] > 0  # (< 2**24)
    assert table["round/fit/loss"][1] == pytest.approx(first["fit/loss"], rel=1e-7)
    last = next(
        r
        for r in records
        if r["kind"] == "eval" and r["split"] == "target" and r["round"] == 2
    )
    accuracy = table[f"eval/target/{TARGET}/accuracy"][2]
    assert accuracy == pytest.approx(last["accuracy"], rel=1e-7)

    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    text = {
        t: acc.Tensors(t)[0].tensor_proto.string_val[0].decode()
        for t in acc.Tags()["tensors"]
        if t.startswith("fedpath/")
    }
    identity = text["fedpath/run/text_summary"]
    assert f"| config_hash | {cfg.hash()} |" in identity
    assert "| method | fedavg |" in identity and f"| target | {TARGET} |" in identity
    assert "rounds: 2" in text["fedpath/config/text_summary"]


@pytest.mark.parametrize("backend", ["tensorboard", "mlflow"])
def test_resume_logs_each_round_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    needs(backend)
    cfg = tiny(tmp_path, f"runtime.tracking={backend}", "train.rounds=3")
    run_dir = run_dir_for(cfg, TARGET, 0)
    with monkeypatch.context() as patch:
        crash_in_round_2(patch)
        with pytest.raises(KeyboardInterrupt):
            run_experiment(cfg)
    # the crashed round's records are in results.jsonl, not in the tracker
    crashed = json.loads((run_dir / "results.jsonl").read_text().splitlines()[-1])
    assert crashed["round"] == 2
    if backend == "tensorboard":
        assert {s for _, s in tensorboard_writes(run_dir / "tensorboard")} == {1}
    else:
        run_id = json.loads((run_dir / MLFLOW_RUN).read_text())["run_id"]
        run, table = mlflow_table(cfg)
        assert run.info.status == "FAILED" and run.info.run_id == run_id
        assert {s for steps in table.values() for s in steps} == {1}

    run_experiment(cfg, resume=True)
    want = expected(run_dir)
    assert {s for steps in want.values() for s in steps} == {1, 2, 3}
    if backend == "tensorboard":
        log_dir = run_dir / "tensorboard"
        assert tensorboard_table(log_dir) == as_float32(want)
        writes = tensorboard_writes(log_dir)
        assert set(writes.values()) == {1}
        assert set(writes) == {(n, s) for n, steps in want.items() for s in steps}
    else:
        run, table = mlflow_table(cfg)  # the same MLflow run, continued
        assert run.info.run_id == run_id and run.info.status == "FINISHED"
        assert table == want


@pytest.mark.parametrize("backend", ["tensorboard", "mlflow"])
def test_tracking_turned_on_at_resume_gets_the_earlier_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    # runtime.tracking is not part of the config hash: a run interrupted untracked
    # resumes tracked, its tracker filled from results.jsonl; tracking_dir moves
    # the logs (TensorBoard: <tracking_dir>/<name>/<method>/<target>/seed<seed>;
    # MLflow: the file store <tracking_dir>)
    needs(backend)
    cfg = tiny(tmp_path, "train.rounds=3")
    logs = tmp_path / "logs"
    on = [f"runtime.tracking={backend}", f"runtime.tracking_dir={logs}"]
    tracked = tiny(tmp_path, "train.rounds=3", *on)
    assert tracked.hash() == cfg.hash()
    run_dir = interrupted_then_resumed(cfg, monkeypatch, tracked)
    want = expected(run_dir)
    assert {s for steps in want.values() for s in steps} == {1, 2, 3}
    assert not (run_dir / "tensorboard").exists()
    assert not (tmp_path / "mlruns").exists()
    if backend == "tensorboard":
        log_dir = logs / cfg.name / "fedavg" / TARGET / "seed0"
        assert tensorboard_table(log_dir) == as_float32(want)
        assert set(tensorboard_writes(log_dir).values()) == {1}
    else:
        assert mlflow_store(tracked) == logs
        run, table = mlflow_table(tracked)
        assert table == want and run.info.status == "FINISHED"


# ---------------------------------------------------------------------- MLflow


def mlflow_table(cfg: ExperimentConfig) -> tuple[Any, Table]:
    """The config's only MLflow run (read from its file store) and its metrics."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_store(cfg).absolute().as_uri())
    experiment = client.get_experiment_by_name(cfg.name)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1, [r.info.run_name for r in runs]
    run = runs[0]
    table: Table = {}
    for key in run.data.metrics:
        history = client.get_metric_history(run.info.run_id, key)
        steps = [m.step for m in history]
        assert len(steps) == len(set(steps)), (key, steps)  # each round once
        table[key] = {m.step: m.value for m in history}
    return run, table


def test_mlflow_metrics_params_tags_and_artifacts(tmp_path: Path) -> None:
    needs("mlflow")
    from mlflow.tracking import MlflowClient

    cfg = tiny(tmp_path, "runtime.tracking=mlflow", "name=tracked")
    run_experiment(cfg)
    run_dir = run_dir_for(cfg, TARGET, 0)
    assert mlflow_store(cfg) == tmp_path / "mlruns"
    run, table = mlflow_table(cfg)
    assert table == expected(run_dir)
    assert set(table[f"eval/target/{TARGET}/accuracy"]) == {1, 2}
    assert run.info.run_id == json.loads((run_dir / MLFLOW_RUN).read_text())["run_id"]
    assert run.info.run_name == f"fedavg/{TARGET}/seed0"
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert (tags["method"], tags["target"], tags["seed"]) == ("fedavg", TARGET, "0")
    assert tags["config_hash"] == cfg.hash()
    params = run.data.params
    assert params["train.rounds"] == "2" and params["algorithm.name"] == "fedavg"
    assert params["model.params.widths"] == "[8, 16]"
    assert params["runtime.tracking"] == "mlflow"
    client = MlflowClient(tracking_uri=mlflow_store(cfg).absolute().as_uri())
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert names == {"config.yaml", "final.json"}
    saved = Path(
        client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))
    )
    assert saved.read_text() == (run_dir / "config.yaml").read_text()


def test_a_fresh_run_replaces_its_earlier_mlflow_run(tmp_path: Path) -> None:
    needs("mlflow")
    cfg = tiny(tmp_path, "runtime.tracking=mlflow", "train.rounds=1")
    run_experiment(cfg)
    run_dir = run_dir_for(cfg, TARGET, 0)
    first = json.loads((run_dir / MLFLOW_RUN).read_text())["run_id"]
    run_experiment(cfg)  # not --resume: redone from round 1
    run, table = mlflow_table(cfg)  # one live run: the first one is deleted
    assert run.info.run_id != first
    assert table == expected(run_dir)


def test_the_flower_coordinator_tracks_its_rounds(
    tmp_path: Path, task_identity: None
) -> None:
    needs("mlflow")
    pytest.importorskip("flwr", reason="pip install 'fedpath[flower]'")
    from tests.flower_helpers import config, nodes_for, run_over_grid

    cfg = config(tmp_path, "runtime.tracking=mlflow")
    run_over_grid(cfg, nodes_for("hospital_0/c0", "hospital_1/c0", "hospital_2/c0"))
    run, table = mlflow_table(cfg)
    assert run.info.status == "FINISHED"
    assert table == expected(run_dir_for(cfg, cfg.lodo.targets[0], 0))
    assert {s for steps in table.values() for s in steps} == {1, 2}


# ----------------------------------------------------------- never stops a run


@pytest.mark.parametrize("where", ["start", "round"])
def test_a_failing_tracker_never_stops_the_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    where: str,
) -> None:
    needs("tensorboard")

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    attr = "__init__" if where == "start" else "_log"
    monkeypatch.setattr(TensorBoardTracker, attr, broken)
    cfg = tiny(tmp_path, "runtime.tracking=tensorboard")
    with caplog.at_level(logging.WARNING, logger="fedpath"):
        record = run_experiment(cfg)[0]
    run_dir = run_dir_for(cfg, TARGET, 0)
    assert (run_dir / "final.json").is_file() and record["round"] == 2
    assert len(expected(run_dir)[f"eval/target/{TARGET}/accuracy"]) == 2
    said = "could not start" if where == "start" else "tracking failed"
    warnings = [r.getMessage() for r in caplog.records if "tracking" in r.message]
    assert len(warnings) == 1 and said in warnings[0] and "disk full" in warnings[0]


# --------------------------------------------------------------------- config


def test_tracking_is_off_by_default_and_outside_the_hash(tmp_path: Path) -> None:
    cfg = load_config()
    assert (cfg.runtime.tracking, cfg.runtime.tracking_dir) == ("none", None)
    needs("tensorboard")
    on = load_config(
        None, ["runtime.tracking=tensorboard", f"runtime.tracking_dir={tmp_path}"]
    )
    assert on.runtime.tracking == "tensorboard" and on.hash() == cfg.hash()


def test_a_bad_backend_names_the_key_and_the_choices() -> None:
    with pytest.raises(
        ConfigError,
        match=r"config key 'runtime.tracking': expected one of 'none', "
        r"'tensorboard', 'mlflow', got 'wandb'",
    ):
        load_config(None, ["runtime.tracking=wandb"])
