"""Arguments several subcommands share (fedpath.utils.cli_args): overrides also
after the options, ``--quiet`` or ``FEDPATH_QUIET=1``, the launcher options."""

from __future__ import annotations

import argparse

import pytest

from fedpath.utils.cli_args import (
    add_launcher,
    add_overrides,
    add_quiet,
    int_at_least,
    is_override,
    is_quiet,
    open_probability,
    parse_args_overrides_anywhere,
    positive_number,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("config")
    parser.add_argument("--only")
    add_overrides(parser)
    add_quiet(parser, "quiet")
    add_launcher(parser)
    return parser


def test_what_reads_as_an_override() -> None:
    assert is_override("train.rounds=5") and is_override("seeds=[0,1]")
    assert not is_override("--jobs=2") and not is_override("=5")
    assert not is_override("configs/a=b.yaml") and not is_override("plain")


def test_overrides_may_follow_the_options() -> None:
    argv = ["s.yaml", "a=1", "--only", "x,y", "b=2", "a=3", "--jobs", "2"]
    args = parse_args_overrides_anywhere(_parser(), argv)
    assert args.overrides == ["a=1", "b=2", "a=3"]  # in order: the later a wins
    assert (args.only, args.jobs, args.launcher) == ("x,y", 2, None)
    with pytest.raises(SystemExit):
        parse_args_overrides_anywhere(_parser(), ["s.yaml", "--only", "x", "stray"])


def test_quiet_from_the_option_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = _parser().parse_args(["s.yaml"])
    assert not is_quiet(args)
    assert is_quiet(_parser().parse_args(["s.yaml", "-q"]))
    monkeypatch.setenv("FEDPATH_QUIET", "1")
    assert is_quiet(args) and is_quiet(argparse.Namespace())  # no --quiet at all


def test_the_launcher_options() -> None:
    args = _parser().parse_args(["s.yaml", "--launcher", "ray", "--address", "h:1"])
    assert (args.launcher, args.address, args.status) == ("ray", "h:1", False)
    with pytest.raises(SystemExit):
        _parser().parse_args(["s.yaml", "--launcher", "slurm"])
    bare = argparse.ArgumentParser()
    add_launcher(bare, status=False)
    assert not hasattr(bare.parse_args([]), "status")


@pytest.mark.parametrize(
    ("low", "bad", "expected"),
    [
        (1, "0", "a positive integer"),
        (1, "-3", "a positive integer"),
        (1, "abc", "a positive integer"),
        (1, "2.5", "a positive integer"),
        (0, "-1", "an integer >= 0"),
        (0, "nan", "an integer >= 0"),
        (2, "1", "an integer >= 2"),
    ],
)
def test_numeric_options_refuse_what_they_cannot_use(
    low: int, bad: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--batch-size", type=int_at_least(low))
    assert parser.parse_args(["--batch-size", str(low + 3)]).batch_size == low + 3
    with pytest.raises(SystemExit) as ex:
        parser.parse_args(["--batch-size", bad])
    assert ex.value.code == 2
    assert (
        f"argument --batch-size: expected {expected}, got {bad!r}"
        in capsys.readouterr().err
    )


def test_int_at_least_says_why() -> None:
    with pytest.raises(
        argparse.ArgumentTypeError, match=r">= 2 \(a batch's variance\)"
    ):
        int_at_least(2, "a batch's variance")("1")


def test_positive_number_refuses_zero_negative_nan_and_infinity() -> None:
    assert positive_number("0.5") == 0.5
    for bad in ("0", "-1", "nan", "inf", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="a finite number > 0"):
            positive_number(bad)


def test_open_probability_takes_only_numbers_strictly_between_0_and_1() -> None:
    assert open_probability("0.25") == 0.25
    for bad in ("0", "1", "-0.5", "1.5", "nan", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"a number in \(0, 1\)"):
            open_probability(bad)
