"""``benchmarks/bench_fedad_probe.py``: a finished run's exported encoder
re-scored with the other probe protocol, without training again."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from fedpath.config import load_config
from fedpath.runtime.experiment import load_dataset, run_dir_for, run_experiment
from tests.conftest import tiny_overrides


@pytest.fixture
def bench(benchmark_script: Callable[[str], ModuleType]) -> ModuleType:
    return benchmark_script("bench_fedad_probe")


@pytest.mark.slow
def test_sec_5_3_2_runs_are_reprobed_inside_the_unseen_hospital(
    tmp_path: Path, bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    over = tiny_overrides(
        tmp_path / "runs",
        "name=probe",
        "algorithm.name=fedavg_ssl",
        "evaluation.protocol=linear_probe",
        "evaluation.probe_folds=2",
        "data.params.num_hospitals=4",
        "lodo.targets=[hospital_3]",
        "evaluation.probe_train=[hospital_0,hospital_1]",
        "train.rounds=1",
        "seeds=[0,1]",
    )
    cfg = load_config(None, over)
    run_experiment(cfg)
    root = tmp_path / "runs" / "probe"
    # the run's own protocol again: each final.json's probe, to the last digit
    assert bench.main([str(root), "--check"]) == 0
    assert "largest difference over 2 runs: 0.00e+00" in capsys.readouterr().out
    # Sec. 5.5: fitted on the unseen hospital's own train split
    assert bench.main([str(root), "--out", str(tmp_path / "s55")]) == 0
    out = capsys.readouterr().out
    assert "Sec. 5.5's probe" in out and "| fedavg_ssl |" in out
    ds = load_dataset(cfg.data)
    for seed in (0, 1):
        run = run_dir_for(cfg, "hospital_3", seed)
        mirror = tmp_path / "s55" / run.relative_to(root)
        got = json.loads((mirror / "final.json").read_text())["evaluation"]["target"]
        was = json.loads((run / "final.json").read_text())["evaluation"]["target"]
        assert was["probe_train"] == ["hospital_0", "hospital_1"]
        assert "probe_train" not in got  # Sec. 5.5 names no other hospital
        assert got["n_train"] == len(ds.split("hospital_3", "train"))
        assert got["n_test"] == was["n_test"] == len(ds.split("hospital_3", "test"))
        assert "probe_train: []" in (mirror / "config.yaml").read_text()
    # resumable: a second call re-scores nothing (the mirrors are kept)
    stamp = (mirror / "final.json").stat().st_mtime_ns
    assert bench.main([str(root), "--out", str(tmp_path / "s55")]) == 0
    assert (mirror / "final.json").stat().st_mtime_ns == stamp
