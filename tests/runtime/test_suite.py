"""Suites of labelled variants of one base experiment: :mod:`fedpath.runtime.suite`."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.config import ConfigError
from fedpath.runtime.suite import load_suite, suite_metrics


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    return p


def _suite(tmp_path: Path, body: str, base: str = "name: s\n") -> Path:
    (tmp_path / "cfg.yaml").write_text(base)
    path = tmp_path / "suite.yaml"
    path.write_text(body)
    return path


VARIANTS = "variants:\n  a: [algorithm.name=fedavg]\n  b: [algorithm.name=fedprox]\n"


def test_each_variant_is_the_base_with_common_own_and_cli_overrides(
    tmp_path: Path,
) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    (tmp_path / "cfg.yaml").write_text("name: s\ntrain:\n  rounds: 7\n")
    path = sub / "suite.yaml"
    path.write_text(
        "description: two methods\nbase: ../cfg.yaml\n"  # relative to the suite
        "overrides: [train.lr=0.5, 'seeds=[1]']\n"
        "variants:\n  a: [algorithm.name=fedavg]\n"
        "  b: [algorithm.name=fedprox, train.lr=0.25]\n"
    )
    desc, cfgs = load_suite(path, overrides=["seeds=[2]"])
    assert desc == "two methods"
    assert [c.method for c in cfgs] == ["a", "b"]  # the label is the method name
    assert [c.algorithm.name for c in cfgs] == ["fedavg", "fedprox"]
    assert [c.train.lr for c in cfgs] == [0.5, 0.25]  # the variant's own wins
    assert [c.seeds for c in cfgs] == [[2], [2]]  # the command line wins
    assert all(c.train.rounds == 7 and c.name == "s" for c in cfgs)
    # without a description: the file's name
    path.write_text("base: ../cfg.yaml\nvariants:\n  a: []\n")
    assert load_suite(path)[0] == "suite"


def test_a_suite_default_picks_the_variants_run_without_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedpath.cli import main

    write(tmp_path, "name: s\n")
    suite = tmp_path / "suite.yaml"
    body = (
        "base: cfg.yaml\nvariants:\n  a: [algorithm.name=fedavg]\n"
        "  b: [algorithm.name=fedprox]\n  c: [algorithm.name=fedccrl]\n"
    )
    suite.write_text(body + "default: [c, a]\n")
    assert [c.method for c in load_suite(suite)[1]] == ["c", "a"]
    assert [c.method for c in load_suite(suite, only=["b"])[1]] == ["b"]
    # fedpath check validates every variant, also those default leaves out
    assert main(["check", str(suite)]) == 0
    assert "valid suite (3 variants)" in capsys.readouterr().out
    suite.write_text(body + "default: [a, z]\n")
    with pytest.raises(ConfigError, match="'default' names 'z' .no such variant."):
        load_suite(suite)
    suite.write_text(body + "default: a\n")
    with pytest.raises(ConfigError, match="'default' must be a non-empty list"):
        load_suite(suite)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (f"base: cfg.yaml\n{VARIANTS}extra: 1\n", "unknown key 'extra'; valid keys"),
        (VARIANTS, "'base' .a config path. is required"),
        ("base: cfg.yaml\nvariants: {}\n", "'variants' must map labels"),
        ("base: cfg.yaml\nvariants: [a]\n", "'variants' must map labels"),
        (f"base: cfg.yaml\n{VARIANTS}overrides: x=1\n", "'overrides' must be a list"),
        ("base: cfg.yaml\nvariants:\n  a: [1]\n", "'variants.a' must be a list"),
    ],
)
def test_a_malformed_suite_names_the_key(
    tmp_path: Path, body: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_suite(_suite(tmp_path, body))


def test_only_names_a_missing_variant_and_the_ones_there_are(tmp_path: Path) -> None:
    path = _suite(tmp_path, f"base: cfg.yaml\n{VARIANTS}")
    with pytest.raises(ConfigError, match="has no variant 'z'; variants: a, b"):
        load_suite(path, only=["a", "z"])
    assert load_suite(path, only=[])[1] == []


def test_suite_metrics_are_the_tables_asked_for(tmp_path: Path) -> None:
    path = _suite(tmp_path, f"base: cfg.yaml\n{VARIANTS}")
    assert suite_metrics(path) is None
    path.write_text(f"base: cfg.yaml\n{VARIANTS}metrics: [accuracy, auroc]\n")
    assert suite_metrics(path) == ["accuracy", "auroc"]
    assert len(load_suite(path)[1]) == 2  # a valid suite key
    path.write_text(f"base: cfg.yaml\n{VARIANTS}metrics: accuracy\n")
    with pytest.raises(ConfigError, match="'metrics' must be a list of metric"):
        suite_metrics(path)


def test_a_bad_variant_names_the_suite_and_the_variant(tmp_path: Path) -> None:
    body = "base: cfg.yaml\nvariants:\n  a: []\n  b: [train.rounds=0]\n"
    path = _suite(tmp_path, body)
    with pytest.raises(ConfigError, match=r"suite '.*suite.yaml', variant 'b': .*"):
        load_suite(path)


def test_bad_metrics_fail_at_load_too(tmp_path: Path) -> None:
    path = _suite(tmp_path, "base: cfg.yaml\n" + VARIANTS + "metrics: 5\n")
    with pytest.raises(ConfigError, match="'metrics' must be a list of metric names"):
        load_suite(path)  # what `fedpath check` runs
