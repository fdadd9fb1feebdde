"""A run's ``results.jsonl``: :mod:`fedpath.runtime.results`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedpath.runtime.results import RunLog
from fedpath.runtime.tracking import Tracker
from fedpath.utils.io import read_jsonl

LABELS = {"method": "fedavg", "target": "hospital_0", "seed": 3}


class Seen(Tracker):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict[str, Any]] = []

    def add(self, record: Mapping[str, Any]) -> None:
        self.records.append(dict(record))


def test_records_are_labelled_lines_and_go_to_the_tracker(tmp_path: Path) -> None:
    log = RunLog(tmp_path, LABELS)
    log.tracker = seen = Seen()
    log.append("round", 1, {"clients": 4})
    log.eval(1, "target", "hospital_0", {"accuracy": 0.5})
    rows = list(read_jsonl(tmp_path / "results.jsonl"))
    assert rows == [
        {**LABELS, "kind": "round", "round": 1, "clients": 4},
        {
            **LABELS,
            "kind": "eval",
            "round": 1,
            "split": "target",
            "domain": "hospital_0",
            "accuracy": 0.5,
        },
    ]
    assert seen.records == rows


def test_failures_are_recorded_but_not_tracked(tmp_path: Path) -> None:
    log = RunLog(tmp_path, LABELS)
    log.tracker = seen = Seen()
    log.failure(2, "fit", "hospital_1/c0", None, "no node serves this client")
    (row,) = read_jsonl(tmp_path / "results.jsonl")
    assert row == {
        **LABELS,
        "kind": "failure",
        "round": 2,
        "stage": "fit",
        "client": "hospital_1/c0",
        "node": None,
        "reason": "no node serves this client",
    }
    assert seen.records == []
