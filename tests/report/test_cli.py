"""``fedpath report`` on the command line (fedpath.report.cli): bad paths and
options refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.cli import main


def test_report_refuses_paths_without_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["report", str(tmp_path), "--out", str(out)]) == 2
    assert "no run directories" in capsys.readouterr().err
    assert main(["report", str(tmp_path), "--out", str(out), "--images", "0"]) == 2
    assert "--images: expected a positive number" in capsys.readouterr().err
    assert not out.exists()
