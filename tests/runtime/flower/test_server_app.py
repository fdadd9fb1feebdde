"""The ServerApp: :mod:`fedpath.runtime.flower.server_app`.

The coordinator's plan and entry point with fakes of the round loop and the
grid (no Flower process); a real federation over a loopback grid is in
``test_flower_loopback.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from flwr.app import Context
from flwr.serverapp import Grid

import fedpath.runtime.flower.server_app as server_app
from fedpath.config import ExperimentConfig, load_config
from fedpath.runtime.experiment import run_dir_for
from fedpath.runtime.flower import (
    RC_CONFIG,
    RC_ON_FAILURE,
    RC_REPLY_TIMEOUT,
    RC_RESUME,
    RC_SELF_DECLARED,
)
from fedpath.runtime.flower.nodes import FlowerSettings
from fedpath.schema import ConfigError
from fedpath.utils.progress import Reporter
from tests.conftest import tiny_overrides


class Recorder:
    """Fakes of the round loop, the transport and the node directory."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.runs: list[dict[str, Any]] = []
        self.directories: list[tuple[Any, ...]] = []
        rec = self

        class FakeRun:
            def __init__(self, cfg: Any, ds: Any, fold: Any, seed: int, *rest: Any,
                         transport: Any, config_hash: str) -> None:  # fmt: skip
                run_dir, reporter = rest
                self.made = transport(self)
                rec.runs.append(
                    dict(target=fold.target, seed=seed, run_dir=run_dir,
                         reporter=reporter, transport=self.made, hash=config_hash)
                )  # fmt: skip

            def run(self, resume: bool) -> dict[str, Any]:
                return {"resume": resume, "n": len(rec.runs)}

        class FakeDirectory:
            def __init__(self, *args: Any) -> None:
                rec.directories.append(args)

        def fake_transport(run: Any, *args: Any) -> tuple[Any, ...]:
            return (run, *args)

        monkeypatch.setattr(server_app, "Run", FakeRun)
        monkeypatch.setattr(server_app, "NodeDirectory", FakeDirectory)
        monkeypatch.setattr(server_app, "FlowerTransport", fake_transport)


def _cfg(tmp_path: Path) -> ExperimentConfig:
    over = ["lodo.targets=[hospital_2,hospital_0]", "seeds=[0,1]"]
    return load_config(None, tiny_overrides(tmp_path, *over))


def test_run_federation_runs_every_fold_and_seed_over_one_node_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Recorder(monkeypatch)
    cfg = _cfg(tmp_path)
    grid = cast(Grid, object())
    settings = FlowerSettings(resume=True, reply_timeout=12.0)

    class Counting(Reporter):
        total = -1

        def start_runs(self, total: int) -> None:
            self.total = total

    reporter = Counting()
    records = server_app.run_federation(grid, cfg, settings, reporter)
    assert records == [{"resume": True, "n": i} for i in (1, 2, 3, 4)]
    assert reporter.total == 4
    expected = [(t, s) for t in ("hospital_2", "hospital_0") for s in (0, 1)]
    assert [(r["target"], r["seed"]) for r in rec.runs] == expected
    assert [r["run_dir"] for r in rec.runs] == [run_dir_for(cfg, *e) for e in expected]
    assert {r["hash"] for r in rec.runs} == {cfg.hash()}  # computed once
    assert all(r["reporter"] is reporter for r in rec.runs)
    # one directory of the grid's nodes, shared by every run's transport
    assert rec.directories == [(grid, 12.0, None)]
    for r in rec.runs:
        run, t_grid, t_settings, directory = r["transport"]
        assert run.made is r["transport"]  # each run's transport is built for it
        assert t_grid is grid and t_settings is settings
        assert type(directory).__name__ == "FakeDirectory"
    assert len({id(r["transport"][3]) for r in rec.runs}) == 1


def test_run_federation_without_a_reporter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Recorder(monkeypatch)
    out = server_app.run_federation(
        cast(Grid, object()), _cfg(tmp_path), FlowerSettings()
    )
    assert [r["resume"] for r in out] == [False] * 4


def test_main_reads_the_run_config_and_logs_each_finished_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = _cfg(tmp_path)
    seen: dict[str, Any] = {}

    def fake_federation(
        grid: Grid, c: ExperimentConfig, settings: FlowerSettings
    ) -> list[dict[str, Any]]:
        seen.update(grid=grid, cfg=c, settings=settings)
        return [
            {"method": "fedavg", "target": "hospital_2", "seed": 0,
             "evaluation": {"target": {"accuracy": 0.5}}},
            {"method": "fedavg", "target": "none", "seed": 1},
        ]  # fmt: skip

    monkeypatch.setattr(server_app, "run_federation", fake_federation)
    log = server_app.log
    monkeypatch.setattr(log, "handlers", [])  # main adds its own (restored after)
    monkeypatch.setattr(log, "level", log.level)
    run_config = {
        RC_CONFIG: cfg.to_yaml(),
        RC_RESUME: True,
        RC_REPLY_TIMEOUT: 30,
        RC_ON_FAILURE: "stop",
        RC_SELF_DECLARED: True,
    }
    grid = cast(Grid, object())
    server_app.main(grid, cast(Context, SimpleNamespace(run_config=run_config)))
    assert seen["grid"] is grid and seen["cfg"].hash() == cfg.hash()
    s = seen["settings"]
    assert (s.resume, s.reply_timeout, s.on_failure) == (True, 30.0, "stop")
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"INFO fedpath: experiment {cfg.name}, algorithm fedavg, 2 round(s); "
        "reply-timeout 30 s, on-failure stop",
        "INFO fedpath: finished fedavg -> hospital_2 seed 0: target accuracy 0.5",
        "INFO fedpath: finished fedavg -> none seed 1: target accuracy None",
    ]
    assert log.level == logging.INFO


def test_main_refuses_a_run_without_a_registry_or_the_opt_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Self-declared client ids only when the run config says so explicitly."""
    started: list[Any] = []

    def fake_federation(*args: Any) -> list[dict[str, Any]]:
        started.append(args)
        return []

    monkeypatch.setattr(server_app, "run_federation", fake_federation)
    monkeypatch.setattr(server_app.log, "handlers", [logging.NullHandler()])
    run_config: dict[str, Any] = {RC_CONFIG: _cfg(tmp_path).to_yaml()}
    context = cast(Context, SimpleNamespace(run_config=run_config))
    with pytest.raises(ConfigError, match="no 'client-registry'.*--allow-self-decl"):
        server_app.main(cast(Grid, object()), context)
    assert started == []
    run_config[RC_SELF_DECLARED] = True
    server_app.main(cast(Grid, object()), context)
    assert len(started) == 1
