"""``fedpath flower``: its subcommand table builds the parser and dispatches;
the small subcommands (certs, keys, app, connect) write what they say."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fedpath.cli import build_parser, main
from fedpath.deploy import cli as flower_cli


def test_the_parser_has_the_table_in_its_order() -> None:
    top = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    flower = top.choices["flower"]
    sub = next(a for a in flower._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(flower_cli.SUBCOMMANDS)
    assert list(sub.choices)[:4] == ["certs", "keys", "app", "connect"]


def test_a_failed_flower_command_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedpath.deploy.processes import DeployError

    def fails(args: argparse.Namespace) -> int:
        raise DeployError(f"flwr said no to {args.dir}")

    add, _ = flower_cli.SUBCOMMANDS["app"]
    monkeypatch.setitem(flower_cli.SUBCOMMANDS, "app", (add, fails))
    assert main(["flower", "app", "somewhere"]) == 2
    assert "error: flwr said no to somewhere" in capsys.readouterr().err


def test_certs_and_keys_write_their_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["flower", "certs", str(tmp_path / "c"), "--host", "10.0.0.1"]
    assert main([*argv, "--days", "2"]) == 0
    for name in ("ca.crt", "server.pem", "server.key"):
        assert (tmp_path / "c" / name).is_file()
    assert "CA certificate (give to every node" in capsys.readouterr().out
    assert main(["flower", "keys", str(tmp_path / "k"), "h0"]) == 0
    assert (tmp_path / "k" / "h0").is_file() and (tmp_path / "k" / "h0.pub").is_file()
    assert "flwr supernode register" in capsys.readouterr().out


def test_app_and_connect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("flwr")
    assert main(["flower", "app", str(tmp_path / "app")]) == 0
    assert (tmp_path / "app" / "pyproject.toml").is_file()
    assert capsys.readouterr().out.strip().endswith("pyproject.toml")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    argv = ["flower", "connect", "trial", "10.0.0.1:9093"]
    assert main([*argv, "--ca", str(tmp_path / "none.crt")]) == 2
    assert "CA certificate" in capsys.readouterr().err
    assert main([*argv, "--insecure"]) == 0
    assert "connection 'trial' -> 10.0.0.1:9093" in capsys.readouterr().out
    assert "[superlink.trial]" in (tmp_path / "home" / "config.toml").read_text()
    with pytest.raises(SystemExit):  # TLS or --insecure: one of them
        main(argv)


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_certs_days_must_be_positive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    with pytest.raises(SystemExit) as err:
        build_parser().parse_args(["flower", "certs", str(tmp_path), "--days", value])
    assert err.value.code == 2
    assert "argument --days: expected a positive integer" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
