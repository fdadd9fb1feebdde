"""``benchmarks/bench_ensemble.py`` end to end on a tiny synthetic run: the seed
ensemble of each held-out domain scored beside its members."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from fedpath.config import load_config
from fedpath.runtime.experiment import run_experiment
from tests.conftest import tiny_overrides


@pytest.mark.slow
def test_the_bench_scores_each_domains_seed_ensemble_beside_its_members(
    benchmark_script: Callable[[str], ModuleType],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = load_config(
        None, tiny_overrides(tmp_path, "seeds=[0,1]", "lodo.targets=[hospital_0]")
    )
    run_experiment(cfg)
    method = next(p for p in tmp_path.rglob("hospital_0") if p.is_dir()).parent
    bench = benchmark_script("bench_ensemble")
    monkeypatch.setattr(sys, "argv", ["bench_ensemble.py", str(method)])
    bench.main()
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| hospital_0"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    members = [float(x) for x in cells[1].split(",")]
    assert len(members) == 2 and float(cells[2]) == pytest.approx(
        sum(members) / 2, abs=0.01
    )
    assert float(cells[4]) == pytest.approx(float(cells[3]) - float(cells[2]), abs=0.02)
    assert "over 1 held-out domains" in out and "x one member (2 members)" in out
