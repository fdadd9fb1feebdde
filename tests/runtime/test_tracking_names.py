"""What a tracker names (fedpath.runtime.tracking_names): a record's scalars under
one name for both backends, and where a run's logs go."""

from __future__ import annotations

import math
from pathlib import Path

from fedpath.config import load_config
from fedpath.runtime.tracking_names import (
    MLFLOW_STORE,
    TENSORBOARD_DIR,
    metric_name,
    mlflow_store,
    run_path,
    scalars,
    tensorboard_dir,
)


def test_metric_names_keep_only_what_mlflow_accepts() -> None:
    assert metric_name("eval", "target", "hospital_1", "accuracy") == (
        "eval/target/hospital_1/accuracy"
    )
    assert metric_name("eval", "a:b", "c d") == "eval/a_b/c d"
    # no empty, "." or ".." path components
    assert metric_name("round", "", ".", "..", "x/", "loss") == "round/_/_/x/loss"


def test_scalars_are_the_numeric_fields_under_their_names() -> None:
    record = {
        "kind": "eval",
        "round": 3,
        "split": "target",
        "domain": "hospital_1",
        "method": "fedavg",
        "seed": 0,
        "accuracy": 0.75,
        "n": 40,
        "auroc": None,  # undefined: left out
        "ece": math.nan,
        "converged": True,  # a flag, not a measure
        "note": "text",
    }
    assert scalars(record) == {
        "eval/target/hospital_1/accuracy": 0.75,
        "eval/target/hospital_1/n": 40.0,
    }
    assert scalars({"kind": "timing", "round": 1, "client_s": 2}) == {
        "timing/client_s": 2.0
    }
    assert scalars({"loss": 1.5}) == {"record/loss": 1.5}


def test_where_the_logs_go(tmp_path: Path) -> None:
    labels = {"method": "fedavg", "target": "scanner/a", "seed": 2}
    cfg = load_config(None, ["name=exp", f"output_dir={tmp_path / 'out'}"])
    assert run_path(cfg, labels) == Path("exp", cfg.method, "scanner_a", "seed2")
    run_dir = tmp_path / "run"
    assert tensorboard_dir(cfg, run_dir, labels) == run_dir / TENSORBOARD_DIR
    assert mlflow_store(cfg) == tmp_path / "out" / MLFLOW_STORE
    logs = tmp_path / "logs"
    moved = load_config(None, ["name=exp", f"runtime.tracking_dir={logs}"])
    assert tensorboard_dir(moved, run_dir, labels) == logs / run_path(moved, labels)
    assert mlflow_store(moved) == logs
