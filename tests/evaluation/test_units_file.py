"""Units files: a benchmark's per-unit metrics as CSV, written by ``fedpath
table --units`` and read back by ``table`` and ``compare`` in place of runs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from fedpath.cli import main
from fedpath.errors import DataError
from fedpath.evaluation.tables import ResultRow
from fedpath.evaluation.units_file import HEADER, read_units, units_text
from fedpath.runtime.environment import fingerprint
from fedpath.runtime.experiment import collect_rows, splits_of

SCORES = {  # method -> (target, seed) -> balanced accuracy
    "fedavg": {("h0", 0): 0.60, ("h0", 1): 0.62, ("h1", 0): 0.70, ("h1", 1): 0.66},
    "better": {("h0", 0): 0.70, ("h0", 1): 0.71, ("h1", 0): 0.79, ("h1", 1): 0.77},
}
BA = ["--metric", "balanced_accuracy"]


def _env(numpy: str) -> dict[str, Any]:
    """A recorded environment (fedpath.runtime.environment) with this numpy."""
    packages = {"torch": "2.14.1", "numpy": numpy}
    return {"packages": packages, "machine": "x86_64", "cpu_capability": "AVX2"}


def _runs(
    root: Path, methods: tuple[str, ...] = tuple(SCORES), numpy: str = "2.4.6"
) -> Path:
    for method in methods:
        for (target, seed), value in SCORES[method].items():
            run = root / method / target / f"seed{seed}"
            run.mkdir(parents=True)
            ev = {"target": {"balanced_accuracy": value, "auroc": value + 0.05}}
            rec = {"method": method, "target": target, "seed": seed, "evaluation": ev}
            rec["environment"] = _env(numpy)
            (run / "final.json").write_text(json.dumps(rec))
    return root


def _compare(paths: list[Path], capsys: pytest.CaptureFixture[str]) -> Any:
    argv = ["compare", *map(str, paths), "--baseline", "fedavg", "--format", "json"]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _written(
    root: Path, capsys: pytest.CaptureFixture[str], methods: tuple[str, ...]
) -> tuple[Path, Path]:
    """``methods``' runs under ``root`` and the units file written from them."""
    runs, units = _runs(root / "runs", methods), root / f"{'-'.join(methods)}.csv"
    assert main(["table", str(runs), "--units", str(units), *BA]) == 0
    capsys.readouterr()
    return runs, units


def test_a_units_file_compares_as_the_runs_it_was_written_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs, units = _written(tmp_path, capsys, tuple(SCORES))
    lines = units.read_text().splitlines()
    assert tuple(lines[0].split(",")) == HEADER
    assert len(lines) == 1 + 8 * 2  # 8 units x 2 metrics
    env = fingerprint(_env("2.4.6"))
    assert f"better,h0,0,target,last,balanced_accuracy,0.7,{env}" in lines
    assert _compare([units], capsys) == _compare([runs], capsys)


def test_rows_run_apart_meet_in_one_paired_comparison(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the baseline's units kept from an earlier day, the method's runs fresh
    _, kept = _written(tmp_path / "old", capsys, ("fedavg",))
    new = _runs(tmp_path / "new", ("better",), numpy="2.5.0")  # installed afresh
    (got,) = _compare([kept, new], capsys)
    units = sorted(SCORES["fedavg"])
    expected = [100 * (SCORES["better"][u] - SCORES["fedavg"][u]) for u in units]
    assert got["diffs"] == pytest.approx(expected)
    assert got["wins"] == 4
    assert got["mixed_environments"] == 4  # every pair joins two environments
    argv = ["compare", str(kept), str(new), "--baseline", "fedavg"]
    assert main(argv) == 0
    assert "4 of the 4 pairs join runs from different" in capsys.readouterr().out
    # the file grows by the new runs' units: read first, then rewritten whole
    assert main(["table", str(kept), str(new), "--units", str(kept), *BA]) == 0
    capsys.readouterr()
    (merged,) = _compare([kept], capsys)
    assert merged["diffs"] == got["diffs"]
    assert merged["mixed_environments"] == 4  # the file kept each run's


def test_a_units_file_beside_its_own_runs_is_named_as_a_duplicate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs, units = _written(tmp_path, capsys, tuple(SCORES))
    assert main(["compare", str(runs), str(units), "--baseline", "fedavg"]) == 2
    err = capsys.readouterr().err
    assert "two finished runs" in err and str(units) in err


def test_undefined_metrics_round_trip_and_non_numbers_are_left_out(
    tmp_path: Path,
) -> None:
    block: dict[str, Any] = {"auroc": math.nan, "accuracy": 0.25, "n": 12}
    block |= {"confusion": [[1, 2], [3, 4]], "calibrated": True}  # not metrics
    path = tmp_path / "u.csv"
    path.write_text(units_text([ResultRow("m", "h0", 3, block)], "target", "last"))
    assert "m,h0,3,target,last,auroc,,\n" in path.read_text()  # no environment
    ((key, (row,)),) = read_units(path).items()
    assert key == ("target", "last")
    assert row.metrics == {"accuracy": 0.25, "auroc": None, "n": 12.0}
    assert splits_of([path]) == ["target"]


def test_the_split_and_selection_asked_for_are_the_ones_read(tmp_path: Path) -> None:
    path = tmp_path / "u.csv"
    text = units_text([ResultRow("m", "h0", 0, {"accuracy": 0.5})], "target", "last")
    text += "m,h0,0,target,selected,accuracy,0.75,\n"
    path.write_text(text)
    (row,) = collect_rows([path], "target", "selected")
    assert row.metrics == {"accuracy": 0.75}
    with pytest.raises(DataError, match=r"no units for --split adapted --select last"):
        collect_rows([path], "adapted", "last")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "the first line must be method,target,seed"),
        ("method,target,seed\n", "the first line must be method,target,seed"),
        (
            "m,h0,0,target,last,accuracy,0.5,a\nm,h0,0,target,last,auroc,0.5,b\n",
            "line 3: method 'm', target 'h0', seed 0 has another environment",
        ),
        ("m,h0,x,target,last,accuracy,0.5,\n", "line 2: 'seed' must be an integer"),
        ("m,h0,0,target,last,accuracy,high,\n", "line 2: 'value' must be a number"),
        ("m,h0,0,target,last,accuracy\n", "line 2: expected 8 fields"),
        (",h0,0,target,last,accuracy,0.5,\n", "line 2: 'method' is empty"),
        ("m,h0,0,somewhere,last,accuracy,0.5,\n", "split 'somewhere' is not one of"),
        (
            "m,h0,0,target,last,accuracy,0.5,\nm,h0,0,target,last,accuracy,0.6,\n",
            "line 3: metric 'accuracy' of method 'm', target 'h0', seed 0 is given",
        ),
    ],
)
def test_a_bad_units_file_is_named_with_its_line_and_field(
    tmp_path: Path, body: str, message: str
) -> None:
    path = tmp_path / "bad.csv"
    header = ",".join(HEADER) + "\n" if not body.startswith("method") and body else ""
    path.write_text(header + body)
    with pytest.raises(DataError, match="bad.csv") as err:
        collect_rows([path], "target", "last")
    assert message in str(err.value)


def test_units_must_be_written_to_a_csv_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = _runs(tmp_path / "runs")
    assert main(["table", str(runs), "--units", str(tmp_path / "u.txt"), *BA]) == 2
    assert "--units" in capsys.readouterr().err
    assert not (tmp_path / "u.txt").exists()
