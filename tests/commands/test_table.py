"""``fedpath table``: the table of finished runs; a metric the runs lack is named
with the ones they have."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
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


def _runs(root: Path) -> Path:
    """Two finished runs (final.json only: what the table reads)."""
    for seed in (0, 1):
        d = root / "exp" / "fedavg" / "h2" / f"seed{seed}"
        d.mkdir(parents=True)
        ev = {"target": {"accuracy": 0.5 + seed / 10, "n": 4}}
        rec = {"method": "fedavg", "target": "h2", "seed": seed, "evaluation": ev}
        (d / "final.json").write_text(json.dumps(rec, indent=2))
    return d


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda t: t[: len(t) // 2], r"final.json': not valid JSON \(.* at line \d"),
        (lambda t: "[1, 2]", "final.json': expected a JSON object, got a list"),
        (lambda t: t.replace('"seed": 1', '"seed": "one"'), "'seed' must be an int"),
    ],
)
def test_a_damaged_final_json_is_one_error_naming_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    damage: Callable[[str], str],
    said: str,
) -> None:
    last = _runs(tmp_path)
    assert main(["table", str(tmp_path)]) == 0
    capsys.readouterr()
    final = last / "final.json"
    final.write_text(damage(final.read_text()))
    for argv in (
        ["table", str(tmp_path)],
        ["compare", str(tmp_path), "--baseline", "fedavg"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert re.search(said, err) and str(last) in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_run_found_twice_is_named_not_averaged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    _runs(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "copy")  # one run, twice
    for argv in (
        ["table", str(tmp_path)],
        ["table", str(tmp_path / "a"), str(tmp_path / "a")],
        ["compare", str(tmp_path), "--baseline", "fedavg"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "two finished runs are method 'fedavg', domain or client 'h2'" in err
        assert "seed0' and '" in err and "Traceback" not in err
