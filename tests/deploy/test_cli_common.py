"""What the ``fedpath flower`` subcommands share."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fedpath.config import ConfigError
from fedpath.deploy.cli_common import add_options, existing, option, tls_args


def test_options_are_named_after_their_keys() -> None:
    p = argparse.ArgumentParser()
    add_options(p, (("data-root", str, "where"), ("threads", int, None)))
    args = p.parse_args(["--threads", "3"])
    assert option(args, "threads") == 3 and option(args, "data-root") is None


def test_tls_or_insecure_exactly_one(capsys: pytest.CaptureFixture[str]) -> None:
    p = argparse.ArgumentParser()
    tls_args(p, "--certs", "folder")
    assert p.parse_args(["--insecure"]).insecure
    assert p.parse_args(["--certs", "d"]).certs == Path("d")
    for argv in ([], ["--insecure", "--certs", "d"]):
        with pytest.raises(SystemExit):
            p.parse_args(argv)
    capsys.readouterr()


def test_existing_names_what_is_missing(tmp_path: Path) -> None:
    f = tmp_path / "ca.crt"
    f.write_text("x")
    assert existing(f, "CA certificate") == f
    with pytest.raises(ConfigError, match="private key .*no.key' does not exist"):
        existing(tmp_path / "no.key", "private key")
