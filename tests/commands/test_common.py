"""What fedpath's own subcommands share."""

from __future__ import annotations

import argparse
import math

import pytest

from fedpath.commands.common import (
    add_common,
    console,
    no_such_metric,
    only,
    packaged_config,
)
from fedpath.config import ConfigError, load_config
from fedpath.evaluation.tables import ResultRow


def test_only_splits_a_comma_list_and_none_means_all() -> None:
    assert only("a, b,,c ") == ["a", "b", "c"]
    assert only(None) is None and only("") is None


def test_packaged_configs_load() -> None:
    for name in ("demo", "demo_base", "demo_fedhd", "demo_fedad"):
        assert packaged_config(name).is_file(), name
    assert load_config(packaged_config("demo_base"), []).name


def test_quiet_console_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    console(True).print("hidden")
    console(False).print("shown")
    assert capsys.readouterr().out == "shown\n"


def test_common_options_are_quiet() -> None:
    p = argparse.ArgumentParser()
    add_common(p)
    assert p.parse_args(["-q"]).quiet and not p.parse_args([]).quiet


def test_a_missing_metric_names_the_numeric_ones_the_runs_have() -> None:
    rows = [
        ResultRow("fedavg", "h0", 0, {"accuracy": 0.5, "n": 10, "ece": None}),
        ResultRow("fedavg", "h1", 0, {"auroc": math.nan}),
    ]
    with pytest.raises(ConfigError, match="expected one of accuracy, auroc$"):
        no_such_metric("mcc", "target", rows)
    with pytest.raises(ConfigError, match="recorded no numeric metric"):
        no_such_metric("mcc", "clients", [ResultRow("a", "h0", 0, {"n": 3})])
