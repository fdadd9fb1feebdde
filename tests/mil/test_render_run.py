"""``fedpath fedhd-render``: arguments checked, the PNG written, the adversarial
flags (the command's parser: :mod:`fedpath.mil.render_cli`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from PIL import Image

from fedpath.config import ConfigError
from fedpath.data.base import DataError
from fedpath.mil import render_cli
from fedpath.mil.decoder import grid_shape
from fedpath.mil.render_cli import register


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["fedhd-render", *argv])


TINY = [
    "data.params.num_hospitals=2",
    "data.params.samples_per_hospital=40",
    "data.params.image_size=16",
    "data.params.slides_per_hospital=2",
    "model.params.widths=[8,16]",
    "train.batch_size=16",
    "runtime.threads=null",
]


def test_cli_handler_writes_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "render.png"
    args = parse(
        "--out", str(out), "--domain", "hospital_1", "--train-epochs", "1",
        "--components", "2", "--tokens", "6", "--iters", "5",
        "--decoder-epochs", "2", "--decoder-width", "16", "--columns", "4", "-q",
        *TINY,
    )  # fmt: skip
    assert render_cli.handler(args) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    with Image.open(out) as im:
        assert im.size == grid_shape(4, 16)


def test_cli_bad_input(tmp_path: Path) -> None:
    png = str(tmp_path / "x.png")
    args = parse("--out", png, "--domain", "nowhere", "-q", *TINY)
    with pytest.raises(DataError, match="nowhere"):
        render_cli.handler(args)
    args = parse("--out", str(tmp_path / "x.jpg"), "-q", *TINY)
    with pytest.raises(ConfigError, match="--out"):
        render_cli.handler(args)
    args = parse("--out", png, "--slide", "slide99", "--train-epochs", "0", "-q", *TINY)
    with pytest.raises(DataError, match="slide99"):
        render_cli.handler(args)
    with pytest.raises(SystemExit):  # a zero rate is the parser's to refuse
        parse("--out", png, "--adversarial", "--d-lr", "0", "-q", *TINY)
    assert not (tmp_path / "x.png").exists()


def test_cli_adversarial_flags_are_validated(tmp_path: Path) -> None:
    png = str(tmp_path / "x.png")
    args = parse("--out", png, "-q", *TINY)
    assert not args.adversarial and args.lambda_rec is None and args.d_lr is None
    bad = [
        (("--adversarial", "--lambda-rec", "-1"), "--lambda-rec: expected a number"),
        (("--lambda-rec", "5"), "--lambda-rec: only used with --adversarial"),
        (("--d-lr", "1e-4"), "--d-lr: only used with --adversarial"),
    ]
    for flags, message in bad:
        args = parse("--out", png, *flags, "-q", *TINY)
        with pytest.raises(ConfigError, match=message):
            render_cli.handler(args)
    assert not (tmp_path / "x.png").exists()


def test_cli_adversarial_writes_png(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FEDPATH_QUIET", raising=False)  # CI sets it: no status line
    out = tmp_path / "gan.png"
    args = parse(
        "--out", str(out), "--train-epochs", "1", "--components", "2",
        "--tokens", "4", "--iters", "2", "--decoder-epochs", "1",
        "--decoder-width", "16", "--columns", "3", "--adversarial",
        "--lambda-rec", "3", "--d-lr", "1e-4", *TINY,
    )  # fmt: skip
    assert render_cli.handler(args) == 0
    assert "L_GAN + 3 L_rec" in capsys.readouterr().out
    with Image.open(out) as im:
        assert im.size == grid_shape(3, 16)
