"""``fedpath tile | features | mvmidog | amibr``: one ``register_<stage>`` per
subcommand, and :func:`run` dispatches by the subcommand's name (the stages'
work: test_tiling.py, test_midog.py, test_amibr.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fedpath.config import ConfigError
from fedpath.errors import DataError
from fedpath.wsi import cli as wsi_cli


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fedpath")
    wsi_cli.register(p.add_subparsers(dest="command", required=True))
    return p


def test_register_adds_the_four_stages_in_order() -> None:
    sub = next(
        a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    assert list(sub.choices) == ["tile", "features", "mvmidog", "amibr"]


def test_run_dispatches_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[tuple[str, bool]] = []

    def recorder(name: str) -> wsi_cli.Handler:
        def handler(args: argparse.Namespace, quiet: bool) -> int:
            seen.append((name, quiet))
            return 0

        return handler

    for name in ("tile", "amibr"):
        monkeypatch.setitem(wsi_cli._HANDLERS, name, recorder(name))
    monkeypatch.delenv("FEDPATH_QUIET", raising=False)
    args = parser().parse_args(["tile", str(tmp_path), "-o", str(tmp_path), "-q"])
    assert wsi_cli.run(args) == 0
    args = parser().parse_args(["amibr", "--annotations", "a.csv", "-o", "o"])
    assert wsi_cli.run(args) == 0
    assert seen == [("tile", True), ("amibr", False)]
    with pytest.raises(ConfigError, match="not a slide subcommand"):
        wsi_cli.run(argparse.Namespace(command="flower"))


def test_a_bad_param_is_named() -> None:
    with pytest.raises(ConfigError, match="--param: expected key=value, got 'x'"):
        wsi_cli._params(["x"])
    assert wsi_cli._params(["widths=[8]", " k = 1"]) == {"widths": [8], "k": 1}


def test_scanner_maps_from_json_or_csv(tmp_path: Path) -> None:
    j = tmp_path / "m.json"
    j.write_text('{"001.tiff": "a", "051.tiff": 2}')
    assert wsi_cli.read_scanner_map(j) == {"001.tiff": "a", "051.tiff": "2"}
    c = tmp_path / "m.csv"
    c.write_text("file_name,scanner\n001.tiff, a \n")
    assert wsi_cli.read_scanner_map(c) == {"001.tiff": "a"}
    c.write_text("001.tiff\n")
    with pytest.raises(DataError, match="row 1 lacks 2 fields"):
        wsi_cli.read_scanner_map(c)


def test_a_scanner_map_that_is_not_utf8_or_not_a_file(tmp_path: Path) -> None:
    c = tmp_path / "m.csv"
    c.write_bytes(b"001.tiff,sc\xe4nner\n")
    with pytest.raises(DataError, match=r"m.csv': not UTF-8 text \(byte 0xe4"):
        wsi_cli.read_scanner_map(c)
    with pytest.raises(DataError, match=r"scanner map '.*' is a folder"):
        wsi_cli.read_scanner_map(tmp_path)


BASE = {
    "tile": ["tile", "s.svs", "--out", "o"],
    "features": ["features", "s.svs", "--out", "o", "--coords", "c"],
    "mvmidog": ["mvmidog", "a.json", "slides", "--out", "o"],
    "amibr": ["amibr", "--annotations", "a.csv", "--out", "o"],
}


@pytest.mark.parametrize(
    ("stage", "option", "value"),
    [
        ("tile", "--patch-size", "0"),
        ("tile", "--step", "-8"),
        ("tile", "--level", "-1"),
        ("tile", "--magnification", "nan"),
        ("tile", "--magnification", "0"),
        ("tile", "--mask-size", "0"),
        ("features", "--batch-size", "0"),
        ("features", "--batch-size", "-3"),
        ("features", "--input-size", "0"),
        ("mvmidog", "--seed", "-1"),
        ("mvmidog", "--patch-size", "4"),
        ("mvmidog", "--max-offset", "-1"),
        ("mvmidog", "--margin", "-5"),
        ("mvmidog", "--border-attempts", "0"),
        ("mvmidog", "--negatives-per-slide", "-2"),
        ("mvmidog", "--mask-size", "0"),
        ("amibr", "--size", "1"),
    ],
)
def test_a_meaningless_number_is_a_usage_error_naming_the_option(
    capsys: pytest.CaptureFixture[str], stage: str, option: str, value: str
) -> None:
    with pytest.raises(SystemExit) as err:
        parser().parse_args([*BASE[stage], option, value])
    assert err.value.code == 2
    assert f"argument {option}: expected" in capsys.readouterr().err
    parser().parse_args(BASE[stage])  # the defaults are valid
