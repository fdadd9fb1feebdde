"""``fedpath plot-ssl``'s command line: RUNS and --out, and missing runs refused
with exit code 2 (the figure itself: test_plots.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.cli import build_parser, find_command, main


def test_runs_and_out() -> None:
    args = build_parser().parse_args(["plot-ssl", "a", "b", "--out", "f.png"])
    assert args.runs == [Path("a"), Path("b")] and args.out == Path("f.png")
    assert args.title is None and find_command("plot-ssl").run == "handler"


def test_missing_runs_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "f.png"
    assert main(["plot-ssl", str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not out.exists()
