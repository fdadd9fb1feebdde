from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.cli import main
from tests.conftest import tiny_overrides


def write_cfg(tmp_path: Path) -> Path:
    p = tmp_path / "exp.yaml"
    p.write_text("name: clitest\nlodo:\n  targets: [hospital_0, hospital_1]\n")
    return p


def test_run_then_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_cfg(tmp_path)
    assert main(["run", str(cfg), *tiny_overrides(tmp_path), "-q"]) == 0
    out_dir = tmp_path / "clitest"
    assert (out_dir / "fedavg" / "hospital_0" / "seed0" / "final.json").is_file()
    capsys.readouterr()
    for fmt, needle in (
        ("markdown", "| fedavg |"),
        ("csv", "fedavg,hospital_0,"),
        ("latex", r"\toprule"),
    ):
        assert main(["table", str(out_dir), "--format", fmt]) == 0
        text = capsys.readouterr().out
        assert needle in text
        assert "hospital_1" in text.replace("\\_", "_")
    out = tmp_path / "t.csv"
    assert (
        main(
            [
                "table",
                str(out_dir),
                "--format",
                "csv",
                "--metric",
                "mcc",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert out.read_text().startswith("method,target,mean,std,n_seeds")


def test_demo_command_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    over = tiny_overrides(tmp_path, "seeds=[0]", "train.rounds=1")
    assert main(["demo", "--methods", "fedavg,fedprox", *over]) == 0
    text = capsys.readouterr().out
    assert "| fedavg |" in text and "| fedprox |" in text and "| Avg |" in text
    # the line under the table, from the same numbers: one seed, so no verdict
    assert (
        "What this shows (balanced_accuracy at the unseen hospital): fedprox's" in text
    )
    assert "one seed, no spread to compare with." in text
    assert (
        tmp_path / "demo" / "fedprox" / "hospital_2" / "seed0" / "final.json"
    ).is_file()


def test_errors_exit_2_and_name_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_cfg(tmp_path)
    assert main(["run", str(cfg), "algorithm.name=nope", "-q"]) == 2
    assert "unknown algorithm 'nope'" in capsys.readouterr().err
    assert (
        main(["run", str(cfg), "lodo.targets=[mars]", *tiny_overrides(tmp_path), "-q"])
        == 2
    )
    assert "domain 'mars' does not exist" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["table", str(tmp_path)]) == 2
    assert "no finished runs" in capsys.readouterr().err


def test_help_and_list(capsys: pytest.CaptureFixture[str]) -> None:
    for cmd in (["--help"], ["run", "--help"], ["demo", "--help"], ["table", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(cmd)
        assert exc.value.code == 0
    assert "Overrides use dotted keys" in capsys.readouterr().out.replace("\n", " ")
    assert main(["list", "algorithms"]) == 0
    out = capsys.readouterr().out
    assert "fedavg" in out and "fedprox" in out and "fedbn" in out


def test_data_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "data",
                "data.params.num_hospitals=2",
                "data.params.samples_per_hospital=8",
                "data.params.image_size=16",
            ]
        )
        == 0
    )
    assert "hospital_1" in capsys.readouterr().out


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
    assert main(["suite", str(suite), "--only", "nope"]) == 2
    assert "has no variant 'nope'" in capsys.readouterr().err
    suite.write_text("base: base.yaml\nvariantz: {}\n")
    assert main(["suite", str(suite)]) == 2
    assert "unknown key 'variantz'" in capsys.readouterr().err
