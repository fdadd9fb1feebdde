"""``fedpath report`` on the command line (fedpath.report.cli): bad paths and
options refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.cli import build_parser, main


def test_report_refuses_paths_without_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["report", str(tmp_path), "--out", str(out)]) == 2
    assert "no run directories" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("option", "value"),
    [("--images", "0"), ("--images", "-3"), ("--images", "nan"), ("--seed", "-1")],
)
def test_a_meaningless_number_is_a_usage_error_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    out = tmp_path / "r.html"
    with pytest.raises(SystemExit) as err:
        build_parser().parse_args(
            ["report", str(tmp_path), "--out", str(out), option, value]
        )
    assert err.value.code == 2
    assert f"argument {option}: expected" in capsys.readouterr().err
