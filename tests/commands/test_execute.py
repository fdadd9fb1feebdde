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


@pytest.mark.parametrize("where", ["is_file", "under_a_file", "run_dir_blocked"])
def test_an_output_dir_that_cannot_be_made_is_one_error_before_the_data_loads(
    tmp_path: Path,
    where: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fedpath.cli import main

    blocker = tmp_path / "taken"
    blocker.write_text("a file")
    out = {
        "is_file": blocker,
        "under_a_file": blocker / "runs",
        "run_dir_blocked": tmp_path / "runs",
    }[where]
    if where == "run_dir_blocked":  # output_dir is fine, the run's folder is not
        out.mkdir()
        blocker = out / "experiment"
        blocker.write_text("a file")
    else:

        def never(configs: object) -> None:
            raise AssertionError("loaded data")

        monkeypatch.setattr(execute_module, "load_datasets", never)
    cfg = load_config(None, tiny_overrides(out))
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(cfg.to_yaml())
    for extra in ([], ["--jobs", "2"]):
        assert main(["run", str(cfg_file), "--quiet", *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: output_dir '{out}': cannot create the folder")
        assert f"{blocker} is a file, not a folder" in err
