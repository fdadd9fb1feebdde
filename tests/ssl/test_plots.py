"""fedpath plot-ssl: figures from results.jsonl round records."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from fedpath.config import ConfigError
from fedpath.ssl import cli
from fedpath.ssl.plots import collect, plot_ssl


def fake_run(root: Path, method: str, seed: int, with_atsa: bool) -> Path:
    run = root / method / f"seed{seed}"
    run.mkdir(parents=True)
    lines = []
    for r in (1, 2, 3):
        rec = {"method": method, "seed": seed, "kind": "round", "round": r}
        rec["fit/loss"] = 3.0 / r + seed
        rec["fit/cl"] = 2.0 / r
        if with_atsa:
            rec.update({"fit/align": 0.1 * r, "fit/ortho": 0.01, "fit/delta": 0.2 / r})
            rec["fit/lambda"] = 0.1 * r
        lines.append(json.dumps(rec))
    lines.append(json.dumps({"method": method, "kind": "eval", "round": 3}))
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_collect_averages_seeds_per_round(tmp_path: Path) -> None:
    fake_run(tmp_path, "fedad", 0, True)
    fake_run(tmp_path, "fedad", 1, True)
    fake_run(tmp_path, "fedavg_ssl", 0, False)
    curves = collect([tmp_path])
    assert curves["fedad"]["fit/loss"] == [(1, 3.5), (2, 2.0), (3, 1.5)]
    assert "fit/lambda" not in curves["fedavg_ssl"]


def test_cli_writes_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake_run(tmp_path / "runs", "fedad", 0, True)
    fake_run(tmp_path / "runs", "moon", 0, False)
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    out = tmp_path / "fig" / "ssl.png"
    args = parser.parse_args(["plot-ssl", str(tmp_path / "runs"), "--out", str(out)])
    assert cli.handler(args) == 0
    assert out.is_file() and out.read_bytes()[:4] == b"\x89PNG"
    assert "fedad:" in capsys.readouterr().out


def test_missing_runs_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        collect([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no results.jsonl"):
        collect([tmp_path / "empty"])


def test_supervised_runs_are_refused_with_a_pointer_to_the_report(
    tmp_path: Path,
) -> None:
    run = fake_run(tmp_path, "fedavg", 0, False)
    (run / "config.yaml").write_text("evaluation:\n  protocol: classifier\n")
    with pytest.raises(ConfigError, match="is a supervised run.*fedpath report"):
        plot_ssl([tmp_path], tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
    (run / "config.yaml").write_text("evaluation:\n  protocol: linear_probe\n")
    assert plot_ssl([tmp_path], tmp_path / "x.png").is_file()
