"""``list``, ``check``, ``data``, ``audit`` and ``stain-report``'s command lines
(what they compute: tests/test_cli_light.py for list, tests/runtime/test_audit.py,
tests/stain/test_analysis.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_data_command(capsys: pytest.CaptureFixture[str]) -> None:
    over = ["data.params.num_hospitals=2", "data.params.samples_per_hospital=8"]
    assert main(["data", *over, "data.params.image_size=16"]) == 0
    out = capsys.readouterr().out
    assert "synthetic: 2 domains" in out and "hospital_1" in out


def test_check_a_config_and_a_suite(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = ROOT / "configs/synthetic_fedavg.yaml"
    assert main(["check", str(cfg), "algorithm.name=fedprox"]) == 0
    assert f"{cfg}: valid (" in capsys.readouterr().out
    assert main(["check", str(cfg), "algorithm.name=nope"]) == 2
    assert "unknown algorithm 'nope'" in capsys.readouterr().err
    suite = ROOT / "configs/ablations/fedstain_statistics.yaml"
    assert main(["check", str(suite)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{suite}: valid suite (")
    n = int(out[0].split("(")[1].split()[0])
    assert n == len(out) - 1 and all(": valid (" in line for line in out[1:])


def test_list_one_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "backbones"]) == 0
    out = capsys.readouterr().out
    assert "small_cnn" in out and "fedavg" not in out


def test_audit_of_a_missing_run_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", str(tmp_path)]) == 2
    assert "traffic.jsonl" in capsys.readouterr().err


def test_audit_names_a_run_directory_that_is_a_file_or_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "f").write_text("x")
    for path, said in ((tmp_path / "f", "is a file"), (tmp_path / "no", "does not")):
        assert main(["audit", str(path)]) == 2
        assert f"run directory {path} {said}" in capsys.readouterr().err


def test_stain_report_out_that_is_a_file_fails_before_reading_images(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "f").write_text("x")
    assert main(["stain-report", "--out", str(tmp_path / "f")]) == 2
    assert "--out: cannot create the folder" in capsys.readouterr().err


def test_stain_report_images_must_be_positive(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["stain-report", "--out", "x", "--images", "0"])
    assert "argument --images: expected a positive integer" in capsys.readouterr().err
