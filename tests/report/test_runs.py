"""The runs a report shows (fedpath.report.runs): found under the given paths,
grouped by experiment, methods in the order they ran."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from fedpath.errors import ConfigError
from fedpath.report.runs import find_experiments


def _run(root: Path, method: str, target: str, seed: int, done: bool, t: int) -> Path:
    d = root / "exp" / method / target / f"seed{seed}"
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump({"algorithm": {"name": method}}))
    os.utime(d / "config.yaml", (t, t))
    if done:
        final = {"method": method, "target": target, "seed": seed}
        (d / "final.json").write_text(json.dumps(final))
    else:
        (d / "results.jsonl").write_text('{"kind": "round", "round": 1}\n')
    return d


def test_runs_are_grouped_and_ordered(tmp_path: Path) -> None:
    _run(tmp_path, "fedprox", "h0", 0, True, 2000)
    _run(tmp_path, "fedavg", "h1", 0, True, 1000)
    _run(tmp_path, "fedavg", "h0", 1, True, 1001)
    unfinished = _run(tmp_path, "fedavg", "h0", 0, False, 1002)
    (tmp_path / "exp" / "notes").mkdir()  # no config.yaml: not a run
    (exp,) = find_experiments([tmp_path])
    assert exp.root == tmp_path / "exp"
    assert exp.methods == ["fedavg", "fedprox"]  # fedavg started first
    assert [(r.method, r.target, r.seed) for r in exp.runs] == [
        ("fedavg", "h0", 0),
        ("fedavg", "h0", 1),
        ("fedavg", "h1", 0),
        ("fedprox", "h0", 0),
    ]
    assert len(exp.finished) == 3 and exp.runs[0].path == unfinished
    assert exp.runs[0].records == [{"kind": "round", "round": 1}]
    assert exp.protocol == "classifier" and not exp.per_client
    first = exp.first_run_any("fedavg")
    assert first is not None and (first.target, first.seed) == ("h0", 1)
    assert exp.first_run("fedavg") is None  # no model file
    (one,) = find_experiments([unfinished])  # a run directory itself
    assert [r.path for r in one.runs] == [unfinished]


def test_paths_without_runs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        find_experiments([tmp_path / "nope"])
    with pytest.raises(ConfigError, match="no run directories"):
        find_experiments([tmp_path])


def test_damaged_run_records_are_named_and_a_live_run_is_read(
    tmp_path: Path,
) -> None:
    from fedpath.errors import DataError

    done = _run(tmp_path, "fedavg", "h0", 0, True, 1000)
    live = _run(tmp_path, "fedavg", "h1", 0, False, 1001)
    # a run still writing: its last line is cut short; read without it
    (live / "results.jsonl").write_text('{"kind": "round", "round": 1}\n{"kin')
    (exp,) = find_experiments([tmp_path])
    assert [len(r.records) for r in exp.runs if r.final is None] == [1]
    (live / "results.jsonl").write_text('{"kind": "round"\n{"round": 2}\n')
    with pytest.raises(DataError, match=r"results.jsonl': line 1 is not valid JSON"):
        find_experiments([tmp_path])
    (live / "results.jsonl").write_text("")
    (done / "final.json").write_text('{"method": "fedavg", "target"')
    with pytest.raises(DataError, match=r"final.json': not valid JSON"):
        find_experiments([tmp_path])
    (done / "final.json").write_text("[]")
    with pytest.raises(DataError, match="final.json': expected a JSON object"):
        find_experiments([tmp_path])
    (done / "config.yaml").write_text("algorithm: [1\n")
    with pytest.raises(ConfigError, match="config.yaml' is not valid YAML"):
        find_experiments([tmp_path])
