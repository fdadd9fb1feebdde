"""``fedpath fedhd-render``'s command line: its defaults, and bad input refused
with exit code 2 (the rendering itself: test_decoder.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.cli import build_parser, find_command, main


def test_defaults_of_the_distillation_and_the_decoder() -> None:
    args = build_parser().parse_args(["fedhd-render", "--out", "g.png", "k=v"])
    assert (args.components, args.covariance, args.tokens, args.iters) == (
        4,
        "diag",
        32,
        200,
    )
    assert (args.decoder_epochs, args.decoder_lr, args.decoder_width) == (20, 2e-3, 64)
    assert not args.adversarial and args.lambda_rec is None and args.d_lr is None
    assert (args.columns, args.seed, args.overrides) == (8, 0, ["k=v"])
    assert find_command("fedhd-render").run == "handler"


def test_out_is_required_and_a_missing_config_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["fedhd-render"])
    capsys.readouterr()
    argv = ["fedhd-render", "--out", str(tmp_path / "g.png")]
    assert main([*argv, "--config", str(tmp_path / "none.yaml")]) == 2
    assert "none.yaml" in capsys.readouterr().err
    assert not (tmp_path / "g.png").exists()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--columns", "0"),
        ("--seed", "-1"),
        ("--components", "0"),
        ("--tokens", "-4"),
        ("--iters", "0"),
        ("--decoder-epochs", "0"),
        ("--decoder-lr", "nan"),
        ("--decoder-lr", "0"),
        ("--decoder-width", "0"),
        ("--train-epochs", "-1"),
        ("--d-lr", "-1e-3"),
    ],
)
def test_a_meaningless_number_is_a_usage_error_naming_the_option(
    capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    with pytest.raises(SystemExit) as err:
        build_parser().parse_args(["fedhd-render", "--out", "g.png", option, value])
    assert err.value.code == 2
    assert f"argument {option}: expected" in capsys.readouterr().err
