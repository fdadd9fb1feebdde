"""``fedpath demo`` and ``fedpath suite``/``ablate``: several methods run as one
suite, then their tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.cli import main
from tests.conftest import tiny_overrides


def test_demo_command_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    over = tiny_overrides(tmp_path, "seeds=[0]", "train.rounds=1")
    assert main(["demo", "--methods", "fedavg,fedprox", *over]) == 0
    text = capsys.readouterr().out
    assert "| fedavg |" in text and "| fedprox |" in text and "| Avg |" in text
    # the lines under the table: fedprox minus fedavg, paired over units
    assert "What this shows (balanced_accuracy at the unseen hospital, each " in text
    assert "- fedprox vs fedavg (balanced_accuracy, " in text
    assert "paired units): " in text and "p = " in text
    assert (
        tmp_path / "demo" / "fedprox" / "hospital_2" / "seed0" / "final.json"
    ).is_file()


def test_an_unknown_demo_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "nope"]) == 2
    assert "demo 'nope' does not exist; choices: stain, fedhd, fedad" in (
        capsys.readouterr().err
    )


def test_suite_runs_labelled_variants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "base.yaml"
    base.write_text(
        "name: abl\nlodo:\n  targets: [hospital_1]\nalgorithm:\n  name: fedstain\n"
    )
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "description: tiny ablation\nbase: base.yaml\n"
        "variants:\n  full: []\n  no_js: [algorithm.params.beta=0]\n"
        '  fedavg: ["algorithm.name=fedavg", "algorithm.params={}"]\n'
    )
    over = tiny_overrides(tmp_path, "train.rounds=1")
    assert main(["ablate", str(suite), *over, "--only", "full,no_js", "-q"]) == 0
    text = capsys.readouterr().out
    assert "| full |" in text and "| no_js |" in text and "fedavg" not in text
    saved = (
        tmp_path / "abl" / "no_js" / "hospital_1" / "seed0" / "config.yaml"
    ).read_text()
    assert "label: no_js" in saved and "beta: 0.0" in saved
    # --no-table: the runs (resumed: nothing left to do), no table
    argv = ["suite", str(suite), *over, "--only", "full", "--resume", "--no-table"]
    assert main(argv) == 0
    assert "| full |" not in capsys.readouterr().out
    assert main(["suite", str(suite), "--only", "nope"]) == 2
    assert "has no variant 'nope'" in capsys.readouterr().err
    suite.write_text("base: base.yaml\nvariantz: {}\n")
    assert main(["suite", str(suite)]) == 2
    assert "unknown key 'variantz'" in capsys.readouterr().err


def test_suite_status_prints_its_shape_even_when_quiet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("name: st\nlodo:\n  targets: [hospital_1, hospital_2]\n")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "description: two\nbase: base.yaml\nvariants:\n  a: []\n"
        '  b: ["train.lr=0.01"]\n'
    )
    argv = ["suite", str(suite), *tiny_overrides(tmp_path), "--status", "-q"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "two: 2 methods x 2 unseen domains x 1 seed" in out
    assert "4 cells: 4 pending" in out
    assert not (tmp_path / "st").exists()


def test_a_suite_header_does_not_count_the_probe_hospitals_as_unseen(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # FedAD Sec. 5.3.2: hospital_0 fits the probe and is never held out, so
    # 'targets: all' over 4 hospitals holds out 3, as lodo_plan does
    base = tmp_path / "base.yaml"
    base.write_text(
        "name: pt\nlodo:\n  targets: all\nalgorithm:\n  name: fedavg_ssl\n"
        "evaluation:\n  protocol: linear_probe\n  probe_train: [hospital_0]\n"
    )
    suite = tmp_path / "suite.yaml"
    suite.write_text("description: probe\nbase: base.yaml\nvariants:\n  a: []\n")
    over = tiny_overrides(tmp_path, "data.params.num_hospitals=4")
    assert main(["suite", str(suite), *over, "--status", "-q"]) == 0
    assert "probe: 1 method x 3 unseen domains x 1 seed" in capsys.readouterr().out


def test_a_suite_whose_sources_have_no_test_split_still_ends_well(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # one slide per hospital: all of it trains, so no source is scored
    base = tmp_path / "base.yaml"
    base.write_text("name: one\nlodo:\n  targets: [hospital_1]\n")
    suite = tmp_path / "suite.yaml"
    suite.write_text("base: base.yaml\nvariants:\n  fedavg: []\n")
    over = tiny_overrides(
        tmp_path, "train.rounds=1", "data.params.slides_per_hospital=1"
    )
    assert main(["suite", str(suite), *over, "-q"]) == 0
    text = capsys.readouterr().out
    assert "on the unseen target domain" in text
    assert "source domains" not in text
