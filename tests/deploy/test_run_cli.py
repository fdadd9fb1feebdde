"""``fedpath flower run``: the run config it would hand to ``flwr run``
(``--dry-run``), with SecAgg+'s settings checked before the run (the run itself:
tests/runtime/test_flower_processes_secagg.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fedpath.cli import main

pytest.importorskip("flwr")

CFG = str(Path(__file__).resolve().parents[2] / "configs/synthetic_fedavg.yaml")


def run_config(text: str) -> dict:
    return tomllib.loads(text)


def test_dry_run_prints_the_run_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["flower", "run", CFG, f"output_dir={tmp_path}", "train.rounds=3"]
    assert (
        main([*argv, "--reply-timeout", "5", "--on-failure", "stop", "--dry-run"]) == 0
    )
    captured = capsys.readouterr()
    values = run_config(captured.out)
    assert "rounds: 3" in values["fedpath-config"]
    assert values["reply-timeout"] == 5.0 and values["on-failure"] == "stop"
    assert values["resume"] is False and values["wait-nodes"] == 120.0
    assert "secure-aggregation" not in values
    assert "is relative" not in captured.err  # an absolute output_dir


def test_a_relative_output_dir_is_noted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["flower", "run", CFG, "output_dir=runs", "--dry-run"]) == 0
    assert "output_dir 'runs' is relative" in capsys.readouterr().err


def test_secure_aggregation_settings_are_checked_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["flower", "run", CFG, f"output_dir={tmp_path}", "--dry-run"]
    argv += ["--secure-aggregation", "secaggplus"]
    assert main([*argv, "--secagg-clipping-range", "4"]) == 0
    values = run_config(capsys.readouterr().out)
    assert values["secure-aggregation"] == "secaggplus"
    assert values["secagg-clipping-range"] == 4.0
    assert main([*argv, "--secagg-num-shares", "-1"]) == 2
    assert "secagg-num-shares" in capsys.readouterr().err
    assert main([*argv, "algorithm.name=fedstain"]) == 2
    assert "'fedstain' uploads" in capsys.readouterr().err
