"""``benchmarks/bench_ensemble.py`` end to end on a tiny synthetic run: the seed
ensemble of each held-out domain scored beside its members."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from fedpath.config import ExperimentConfig, load_config
from fedpath.data.partition import make_clients
from fedpath.ensemble import save_ensemble
from fedpath.evaluation.metrics import classification_metrics
from fedpath.loading import load_model
from fedpath.runtime.experiment import load_dataset, run_experiment
from fedpath.tasks.images import predict_probs
from tests.conftest import tiny_overrides


@pytest.fixture(scope="module")
def two_seeds(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[ExperimentConfig, Path]:
    """One tiny run of two seeds holding out hospital_0, both holding out the
    same validation slides, shared by the tests (which only read it), and its
    output folder."""
    out = tmp_path_factory.mktemp("runs")
    cfg = load_config(
        None,
        tiny_overrides(
            out,
            "seeds=[0,1]",
            "lodo.targets=[hospital_0]",
            "partition.validation=0.25",
            "partition.validation_seed=0",
        ),
    )
    run_experiment(cfg)
    return cfg, out


def run_bench(
    bench: ModuleType,
    runs: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *flags: str,
) -> tuple[str, list[str]]:
    """The bench's output on the method folder under ``runs`` and the cells of
    its hospital_0 row."""
    method = next(p for p in runs.rglob("hospital_0") if p.is_dir()).parent
    monkeypatch.setattr(sys, "argv", ["bench_ensemble.py", str(method), *flags])
    bench.main()
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| hospital_0"))
    return out, [c.strip() for c in row.strip("|").split("|")]


@pytest.mark.slow
def test_the_bench_scores_each_domains_seed_ensemble_beside_its_members(
    benchmark_script: Callable[[str], ModuleType],
    two_seeds: tuple[ExperimentConfig, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, runs = two_seeds
    out, cells = run_bench(
        benchmark_script("bench_ensemble"), runs, monkeypatch, capsys
    )
    members = [float(x) for x in cells[1].split(",")]
    assert len(members) == 2 and float(cells[2]) == pytest.approx(
        sum(members) / 2, abs=0.01
    )
    assert float(cells[4]) == pytest.approx(float(cells[3]) - float(cells[2]), abs=0.02)
    assert "over 1 held-out domains" in out and "x one member (2 members)" in out


@pytest.mark.slow
def test_tta_replaces_the_view_of_members_and_of_each_ensemble_member(
    benchmark_script: Callable[[str], ModuleType],
    two_seeds: tuple[ExperimentConfig, Path],
    tmp_path: Path,
) -> None:
    cfg, runs = two_seeds
    files = sorted(runs.rglob("model.fpm"))
    bench = benchmark_script("bench_ensemble")
    split = load_dataset(cfg.data).split("hospital_0", cfg.lodo.eval_split)
    cpu = torch.device("cpu")

    def by_hand(paths: list[Path]) -> dict:
        """The mean of the members' dihedral probabilities, each calibrated by
        its own file (its validation temperature), as an ensemble computes them."""
        p = np.mean(
            [
                load_model(f).calibrate(
                    predict_probs(load_model(f).model, split, 64, cpu, "dihedral")
                    .double()
                    .numpy()
                )
                for f in paths
            ],
            axis=0,
        )
        return classification_metrics(split.labels, p, p.argmax(1))

    member, _ = bench._score(files[0], split, 64, "dihedral")
    assert member == pytest.approx(by_hand(files[:1]))
    assert bench._score(files[0], split, 64, None)[0] != member
    save_ensemble(tmp_path / "ens.fpm", files)
    ens, _ = bench._score(tmp_path / "ens.fpm", split, 64, "dihedral")
    assert ens == pytest.approx(by_hand(files))


@pytest.mark.slow
def test_on_the_validation_split_members_are_scored_on_slides_none_trained_on(
    benchmark_script: Callable[[str], ModuleType],
    two_seeds: tuple[ExperimentConfig, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg, runs = two_seeds
    bench = benchmark_script("bench_ensemble")
    split = bench.validation_split([cfg], "hospital_0")
    dataset = load_dataset(cfg.data)
    sources = [d for d in dataset.domains if d != "hospital_0"]
    assert len(split) and set(split.domains.tolist()) <= set(sources)
    for seed in (0, 1):
        clients = make_clients(dataset, sources, cfg.partition, seed)
        trained = {s for c in clients for s in c.train.slides.tolist()}
        assert not trained & set(split.slides.tolist())
    out, cells = run_bench(bench, runs, monkeypatch, capsys, "--split", "validation")
    assert "scored on the sources' validation slides" in out
    first = float(cells[1].split(",")[0])
    files = sorted(runs.rglob("hospital_0/seed*/model.fpm"))
    member, _ = bench._score(files[0], split, 64, None)
    assert first == pytest.approx(100 * member["balanced_accuracy"], abs=0.01)
    # members that each held out their own slides cannot be scored there
    own = cfg.replace(**{"partition.validation_seed": None})
    with pytest.raises(SystemExit, match="partition.validation_seed"):
        bench.validation_split([own], "hospital_0")
    with pytest.raises(SystemExit, match="differ in partition or data"):
        bench.validation_split(
            [cfg, cfg.replace(**{"partition.validation_seed": 1})], "hospital_0"
        )
