"""``fedpath run``: every fold x seed of a config, then (``--table``) its table."""

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
    assert main(["run", str(cfg), *tiny_overrides(tmp_path), "-q", "--table"]) == 0
    out_dir = tmp_path / "clitest"
    assert (out_dir / "fedavg" / "hospital_0" / "seed0" / "final.json").is_file()
    # --table: the results table follows, even when quiet
    assert "| fedavg |" in capsys.readouterr().out
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
    argv = ["table", str(out_dir), "--format", "csv", "--metric", "mcc"]
    assert main([*argv, "--out", str(out)]) == 0
    assert out.read_text().startswith("method,target,mean,std,n_seeds")


def test_status_describes_the_cells_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_cfg(tmp_path)
    assert main(["run", str(cfg), *tiny_overrides(tmp_path), "--status"]) == 0
    out = capsys.readouterr().out
    assert "2 cells: 2 pending" in out and "results in" not in out
    assert not (tmp_path / "clitest").exists()
