"""Property-based tests of the run-record readers: garbage gives a fedpath error."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hypothesis")

from hypothesis import given
from hypothesis import strategies as st

from tests.property_helpers import JSON, REUSES_FOLDER, TEXT, _write, outcome

FINAL = st.fixed_dictionaries(
    {"method": st.text(max_size=6) | JSON, "target": st.text(max_size=6) | JSON},
    optional={
        "seed": st.integers(0, 3) | JSON,
        "evaluation": st.dictionaries(
            st.sampled_from(
                [
                    "target",
                    "source_worst",
                    "clients",
                    "adapted",
                    "selected",
                    "averaged",
                    "source_mean_accuracy",
                    "source",
                ]
            ),
            JSON
            | st.dictionaries(st.sampled_from(["accuracy", "target", "n", "h0"]), JSON),
        ),
    },
).map(json.dumps)


def _table(run_dir: Path, split: str | None) -> Any:
    from fedpath.commands.table import print_table

    with contextlib.redirect_stdout(io.StringIO()):
        return outcome(
            lambda: print_table([run_dir], "accuracy", split, "csv", None, True)
        )


@REUSES_FOLDER
@given(
    text=TEXT | st.binary(max_size=100) | FINAL,
    split=st.sampled_from([None, "target", "clients", "adapted", "source_worst"]),
)
def test_final_json_of_garbage_in_the_table_and_report(
    folder: Path, text: str | bytes, split: str | None
) -> None:
    from fedpath.report.runs import find_experiments
    from fedpath.runtime.records import read_final

    run_dir = folder / "exp" / "m" / "t" / "seed0"
    run_dir.mkdir(parents=True, exist_ok=True)
    _write(run_dir / "config.yaml", "algorithm: {name: fedavg}\n")
    _write(run_dir / "final.json", text)
    got = outcome(lambda: read_final(run_dir))
    assert got is None or isinstance(got, dict)
    _table(run_dir, split)
    outcome(lambda: find_experiments([run_dir]))


RESULT = st.fixed_dictionaries(
    {},
    optional={
        "round": st.integers(0, 3) | JSON,
        "kind": st.sampled_from(["round", "eval"]) | JSON,
        "split": st.sampled_from(["target", "source", "client"]) | JSON,
        "accuracy": st.floats() | JSON,
        "fit/loss": st.floats() | JSON,
        "domain": JSON,
    },
).map(json.dumps)
LINES = st.lists(
    TEXT.filter(lambda t: "\n" not in t) | JSON.map(json.dumps) | RESULT, max_size=5
)


@REUSES_FOLDER
@given(lines=LINES, newline=st.booleans())
def test_results_jsonl_of_garbage(
    folder: Path, lines: list[str], newline: bool
) -> None:
    from fedpath.report.runs import find_experiments
    from fedpath.runtime.records import read_json_lines

    run_dir = folder / "live" / "m" / "t" / "seed0"
    run_dir.mkdir(parents=True, exist_ok=True)
    _write(run_dir / "config.yaml", "algorithm: {name: fedavg}\n")
    text = "\n".join(lines) + ("\n" if newline else "")
    path = _write(run_dir / "results.jsonl", text)
    got = outcome(lambda: read_json_lines(path, "run record"))
    assert got is None or all(isinstance(r, dict) for r in got.records)
    experiments = outcome(lambda: find_experiments([run_dir]))
    if experiments:  # the report's curves of what was read
        from fedpath.report.fig_curves import collect_curves

        collect_curves(experiments[0].runs)


ENTRY = st.lists(JSON, max_size=6) | st.tuples(
    st.sampled_from(["weights", "pool", "stats"]),
    st.text(max_size=4),
    st.sampled_from(["float32", "uint8"]),
    st.lists(st.integers(-1, 64), max_size=4),
    st.integers(-1, 10**6),
).map(list)
TRAFFIC = st.fixed_dictionaries(
    {},
    optional={
        "round": st.integers(0, 3) | JSON,
        "stage": st.sampled_from(["fit", "stats"]) | JSON,
        "client": st.text(max_size=4) | JSON,
        "received": st.lists(ENTRY, max_size=3) | JSON,
        "sent": st.lists(ENTRY, max_size=3) | JSON,
    },
).map(json.dumps)


@REUSES_FOLDER
@given(
    lines=st.lists(TRAFFIC | TEXT.filter(lambda t: "\n" not in t), max_size=4),
    config=TEXT | st.just("data: {params: {image_size: 32}}\n"),
)
def test_traffic_jsonl_of_garbage_in_the_audit(
    folder: Path, lines: list[str], config: str
) -> None:
    from fedpath.runtime.audit import audit

    run_dir = folder / "traffic"
    run_dir.mkdir(exist_ok=True)
    _write(run_dir / "config.yaml", config)
    _write(run_dir / "traffic.jsonl", "".join(f"{line}\n" for line in lines))
    got = outcome(lambda: audit(run_dir, detail=True))
    assert got is None or (isinstance(got, tuple) and len(got) == 2)
