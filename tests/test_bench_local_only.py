"""``benchmarks/bench_local_only.py`` end to end on the tiny synthetic hospitals:
each source hospital alone (``lodo.sources``), the row as their mean per unit,
paired with a federated run of the same config."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from fedpath.cli import main
from fedpath.config import load_config
from fedpath.evaluation.units_file import rows_for
from fedpath.runtime.experiment import SPLITS, run_experiment
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]
#: two held-out hospitals of three, one seed: four local runs
OVER = [
    *(o for o in TINY if not o.startswith("runtime.threads")),
    "runtime.threads=1",
    "train.rounds=1",
    "lodo.targets=[hospital_0,hospital_2]",
]


def bench_out(
    bench: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *argv: str,
) -> str:
    monkeypatch.setattr(sys, "argv", ["bench_local_only.py", *argv])
    bench.main()
    return str(capsys.readouterr().out)


def target_ba(run: Path) -> float:
    final = json.loads((run / "final.json").read_text())
    return float(final["evaluation"]["target"]["balanced_accuracy"])


@pytest.mark.slow
def test_the_row_is_the_mean_of_each_hospital_alone_paired_with_a_method(
    tmp_path: Path,
    benchmark_script: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = str(ROOT / "configs" / "synthetic_fedavg.yaml")
    fed = load_config(
        ROOT / "configs" / "synthetic_fedavg.yaml",
        [*OVER, f"output_dir={tmp_path / 'fed'}", "label=fedavg"],
    )
    run_experiment(fed)
    bench = benchmark_script("bench_local_only")
    out_dir = tmp_path / "local"
    args = [config, "--out", str(out_dir), *OVER, "--jobs", "2"]
    out = bench_out(
        bench, monkeypatch, capsys, *args, "--against", str(tmp_path / "fed")
    )
    runs = {
        (p.parents[2].name, p.parents[1].name): p.parents[1]
        for p in out_dir.rglob("final.json")  # <label>/<target>/seed0/final.json
    }
    assert set(runs) == {
        ("local_hospital_1", "hospital_0"),
        ("local_hospital_2", "hospital_0"),
        ("local_hospital_0", "hospital_2"),
        ("local_hospital_1", "hospital_2"),
    }
    for (label, target), run in runs.items():  # each is one hospital, alone
        cfg = load_config(run / "seed0" / "config.yaml")
        assert cfg.lodo.sources == [label.removeprefix("local_")]
        assert cfg.lodo.targets == [target] and cfg.algorithm.name == "fedavg"
    row = {
        t: 100
        * np.mean([target_ba(r / "seed0") for (_, tt), r in runs.items() if tt == t])
        for t in ("hospital_0", "hospital_2")
    }
    head = out.splitlines().index("| hospital_0 | hospital_2 | Avg |")
    line = out.splitlines()[head + 2]  # one seed: each cell its value alone
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[0] == f"{row['hospital_0']:.2f}"
    assert cells[1] == f"{row['hospital_2']:.2f}"
    assert cells[2] == f"{np.mean(list(row.values())):.2f}"
    fed_ba = {
        t: 100 * target_ba(tmp_path / "fed" / fed.name / "fedavg" / t / "seed0")
        for t in row
    }
    diff = np.mean([fed_ba[t] - row[t] for t in row])
    assert (
        f"fedavg vs local (balanced_accuracy, 2 paired units): {diff:+.2f} points"
        in out
    )
    # a second call hands the finished runs back without starting a process
    stamp = {k: (r / "seed0" / "final.json").stat().st_mtime for k, r in runs.items()}

    def no_process(*a: object, **k: object) -> None:
        raise AssertionError("a finished run was started again")

    monkeypatch.setattr(bench.subprocess, "run", no_process)
    again = bench_out(bench, monkeypatch, capsys, *args)
    assert line in again.splitlines()
    assert stamp == {
        k: (r / "seed0" / "final.json").stat().st_mtime for k, r in runs.items()
    }
    # --units keeps the row beside a units file's others, read back by compare
    units = tmp_path / "units.csv"
    assert main(["table", str(tmp_path / "fed"), "--units", str(units)]) == 0
    for _ in range(2):  # a second write replaces the local units, keeps the rest
        kept = bench_out(bench, monkeypatch, capsys, *args, "--units", str(units))
        assert f"2 local units written to {units} (4 in all)" in kept
    held = rows_for(units, "target", "last", SPLITS)
    assert sorted(r.method for r in held) == [*["fedavg"] * 2, *[bench.LOCAL] * 2]
    # the row keeps every metric its runs recorded (each the hospitals' mean)
    assert len({frozenset(r.metrics) for r in held}) == 1
    for r in (r for r in held if r.method == bench.LOCAL):
        alone = [
            json.loads((run / "seed0" / "final.json").read_text())
            for (_, t), run in runs.items()
            if t == r.target
        ]
        for name in ("accuracy", "balanced_accuracy", "ece"):
            want = np.mean([f["evaluation"]["target"][name] for f in alone])
            assert r.metrics[name] == pytest.approx(want)
    assert main(["compare", str(units), "--baseline", bench.LOCAL]) == 0
    assert f"2 paired units): {diff:+.2f} points" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--units .*expected a .csv file name"):
        bench_out(bench, monkeypatch, capsys, *args, "--units", str(tmp_path))
    # and refuses them for a changed config, naming the key
    with pytest.raises(SystemExit, match="train.lr"):
        bench_out(bench, monkeypatch, capsys, *args, "train.lr=0.5")


def test_a_suite_needs_its_variant_and_a_config_takes_none(
    tmp_path: Path,
    benchmark_script: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = benchmark_script("bench_local_only")
    suite = str(ROOT / "configs" / "claims" / "fedstain_synthetic.yaml")
    with pytest.raises(SystemExit, match="is a suite: name its --variant"):
        bench_out(bench, monkeypatch, capsys, suite, "--out", str(tmp_path))
    config = str(ROOT / "configs" / "synthetic_fedavg.yaml")
    with pytest.raises(SystemExit, match="--variant fedavg: .* is a config"):
        bench_out(
            bench, monkeypatch, capsys, config, "--variant", "fedavg", "--out", "x"
        )
    bad = [config, "--out", str(tmp_path), *OVER, "lodo.targets=[hospital_0]"]
    with pytest.raises(SystemExit, match="'lodo.sources': domain 'nowhere'"):
        bench_out(bench, monkeypatch, capsys, *bad, "lodo.sources=[nowhere]")
