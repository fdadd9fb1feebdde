"""``fedpath table``: the table of finished runs; a metric the runs lack is named
with the ones they have."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.cli import build_parser, main
from fedpath.commands.table import SPLIT_TITLES


def test_no_finished_runs_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["table", str(tmp_path)]) == 2
    assert "no finished runs" in capsys.readouterr().err


def test_every_split_choice_has_a_title() -> None:
    args = build_parser().parse_args(["table", "runs"])
    assert args.split is None and args.select == "last"
    for split in SPLIT_TITLES:
        assert build_parser().parse_args(["table", "r", "--split", split]).split
    with pytest.raises(SystemExit):
        build_parser().parse_args(["table", "r", "--split", "nope"])
