"""The ``fedpath`` command line: one table of subcommands builds the parser and
dispatches; errors exit 2 naming the problem."""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import pytest

from fedpath import cli
from fedpath.cli import COMMANDS, Command, build_parser, find_command, main
from fedpath.utils.cli_args import SubParsers
from tests.conftest import tiny_overrides


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def test_the_parser_has_exactly_the_table_in_its_order() -> None:
    expected: list[str] = []
    for command in COMMANDS:
        expected += [command.name, *command.aliases]
    assert _subcommands(build_parser()) == expected
    assert len(set(expected)) == len(expected)


def test_every_row_names_a_register_and_a_run_function() -> None:
    for command in COMMANDS:
        assert callable(command.handler()), command.name
        assert find_command(command.name) is command
        for alias in command.aliases:
            assert find_command(alias) is command
    assert find_command("ablate").name == "suite"
    with pytest.raises(KeyError, match="nope"):
        find_command("nope")


def test_main_dispatches_through_the_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a command module of its own: main finds it by name (or alias) in the table
    mod = types.ModuleType("fedpath_test_hello")

    def register(sub: SubParsers) -> None:
        p = sub.add_parser("hello", aliases=["hi"])
        p.add_argument("--code", type=int, default=0)

    def run(args: argparse.Namespace) -> int:
        print(f"hello from {args.command}")
        return int(args.code)

    mod.register = register  # type: ignore[attr-defined]
    mod.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    row = Command("hello", mod.__name__, aliases=("hi",))
    monkeypatch.setattr(cli, "COMMANDS", (*COMMANDS, row))
    assert main(["hello"]) == 0
    assert main(["hi", "--code", "3"]) == 3
    assert capsys.readouterr().out == "hello from hello\nhello from hi\n"


def test_errors_exit_2_and_name_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "exp.yaml"
    cfg.write_text("name: clitest\nlodo:\n  targets: [hospital_0, hospital_1]\n")
    assert main(["run", str(cfg), "algorithm.name=nope", "-q"]) == 2
    assert "unknown algorithm 'nope'" in capsys.readouterr().err
    assert (
        main(["run", str(cfg), "lodo.targets=[mars]", *tiny_overrides(tmp_path), "-q"])
        == 2
    )
    assert "domain 'mars' does not exist" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_keyboard_interrupt_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(Command, "handler", lambda self: interrupted)
    assert main(["list"]) == 130
    assert "continue with --resume" in capsys.readouterr().err


def test_help_and_list(capsys: pytest.CaptureFixture[str]) -> None:
    for cmd in (["--help"], ["run", "--help"], ["demo", "--help"], ["table", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(cmd)
        assert exc.value.code == 0
    assert "Overrides use dotted keys" in capsys.readouterr().out.replace("\n", " ")
    assert main(["list", "algorithms"]) == 0
    out = capsys.readouterr().out
    assert "fedavg" in out and "fedprox" in out and "fedbn" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "{cfg}"],
        ["check", "{cfg}"],
        ["suite", "{cfg}"],
        ["ablate", "{cfg}"],
        ["data", "--config", "{cfg}"],
        ["stain-report", "--config", "{cfg}", "--out", "{tmp}/sr"],
    ],
)
@pytest.mark.parametrize(
    ("made", "said"),
    [("folder", "is a folder; expected a YAML file"), ("missing", "does not exist")],
)
def test_every_config_path_names_a_folder_or_a_missing_file(
    tmp_path: Path,
    argv: list[str],
    made: str,
    said: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = tmp_path / "configs"
    if made == "folder":
        cfg.mkdir()
    words = [w.format(cfg=cfg, tmp=tmp_path) for w in argv]
    assert main([*words, "-q"] if argv[0] in ("run", "suite", "ablate") else words) == 2
    err = capsys.readouterr().err
    assert f"'{cfg}' {said}" in err and len(err.strip().splitlines()) == 1
