"""The cells of run/demo/suite: a bad launcher fails before any data loads;
``--status`` describes the cells and runs none; the serial launcher runs them."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fedpath.commands import execute as execute_module
from fedpath.commands.execute import execute, launch_options, load_datasets
from fedpath.config import ConfigError, ExperimentConfig, load_config
from tests.conftest import tiny_overrides


def test_a_bad_launcher_fails_before_the_data_loads(
    tiny_cfg: ExperimentConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(configs: object) -> None:
        raise AssertionError("loaded data")

    monkeypatch.setattr(execute_module, "load_datasets", never)
    args = argparse.Namespace(launcher="serial", jobs=3, address=None)
    with pytest.raises(ConfigError, match="--jobs 3 with --launcher serial"):
        execute([tiny_cfg], args, True, False)


def test_launch_options_read_absent_options_as_defaults() -> None:
    opts = launch_options(argparse.Namespace())
    assert opts.launcher == "serial" and not opts.parallel
    assert launch_options(argparse.Namespace(jobs=2)).launcher == "local"


def test_each_dataset_loads_once(tiny_cfg: ExperimentConfig) -> None:
    datasets = load_datasets([tiny_cfg, tiny_cfg])
    assert list(datasets) == [repr(tiny_cfg.data)]


def test_status_then_serial_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    over = ["lodo.targets=[hospital_0]", "train.rounds=1"]
    cfg = load_config(None, tiny_overrides(tmp_path, *over))
    assert execute([cfg], argparse.Namespace(status=True), True, False) == 0
    assert "1 cell: 1 pending" in capsys.readouterr().out
    assert not list(tmp_path.rglob("final.json"))
    assert execute([cfg], argparse.Namespace(), True, False) == 0
    assert len(list(tmp_path.rglob("final.json"))) == 1
    assert execute([cfg], argparse.Namespace(status=True), True, False) == 0
    assert "1 cell: 1 done" in capsys.readouterr().out
