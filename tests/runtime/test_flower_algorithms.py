"""Every kind of algorithm runs over Flower exactly as in-process.

:class:`~tests.runtime.test_flower_loopback.LoopbackGrid` (Flower's wire serialization,
the real ClientApp, no processes) for the families beyond image classifiers:

- slide bags with per-client evaluation (``evaluation.protocol: local``): FedHD
  (one-round synthetic-slide exchange, a hospital with its own architecture),
  FedAvg-MIL, local MIL, and FedHD, DESA and HistoFS with a feature extractor
  per hospital (``spaces: adapt``: slides and styles per space, HistoFS's group
  averages); the nodes evaluate their deployed model on their own test
  slides and only metrics come back;
- self-supervised with a linear probe on the unseen hospital: FedAD (ATSA,
  disentangling head kept on the node).

Equality is exact: the same evaluation records, the same round records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr")

from fedpath.config import ExperimentConfig, load_config
from fedpath.runtime.experiment import run_dir_for, run_experiment
from fedpath.utils.io import read_jsonl
from tests.flower_helpers import nodes_for, run_over_grid
from tests.mil_helpers import ADAPT, FEDHD, SMALL
from tests.mil_helpers import TINY as BAGS
from tests.ssl_helpers import SSL_TINY

HOSPITALS = ("hospital_0/c0", "hospital_1/c0", "hospital_2/c0")


def rows(cfg: ExperimentConfig, target: str, kind: str) -> list[dict[str, Any]]:
    path = run_dir_for(cfg, target, 0) / "results.jsonl"
    return [r for r in read_jsonl(path) if r["kind"] == kind]


def assert_same(
    flower: ExperimentConfig, inproc: ExperimentConfig, target: str
) -> None:
    assert rows(flower, target, "failure") == []
    evals = rows(inproc, target, "eval")
    assert evals and rows(flower, target, "eval") == evals
    for a, b in zip(
        rows(flower, target, "round"), rows(inproc, target, "round"), strict=True
    ):
        assert {k: a[k] for k in b} == b


def both(tmp_path: Path, base: list[str], *extra: str) -> tuple[ExperimentConfig, ...]:
    flower, inproc = (
        load_config(None, [*base, *extra, f"output_dir={tmp_path / sub}"])
        for sub in ("flower", "inproc")
    )
    run_experiment(inproc)
    return flower, inproc


@pytest.mark.parametrize(
    "extra",
    [
        [*FEDHD, "algorithm.params.models={hospital_2: transmil}"],
        ["algorithm.name=fedavg_mil", "train.rounds=2"],
        ["algorithm.name=local_mil"],
        [*FEDHD, *ADAPT],
        ["algorithm.name=desa", *SMALL["desa"], *ADAPT, "train.rounds=2"],
        ["algorithm.name=histofs", *ADAPT, "train.rounds=2"],
    ],
    ids=[
        "fedhd",
        "fedavg_mil",
        "local_mil",
        "fedhd_spaces",
        "desa_spaces",
        "histofs_spaces",
    ],
)
def test_slide_bag_algorithms_with_local_evaluation(
    tmp_path: Path,
    task_identity: None,
    extra: list[str],
) -> None:
    flower, inproc = both(tmp_path, [*BAGS, "seeds=[0]"], *extra)
    run_over_grid(flower, nodes_for(*HOSPITALS))
    assert_same(flower, inproc, "none")
    clients = {r["domain"] for r in rows(flower, "none", "eval")}
    assert clients == set(HOSPITALS)  # every node evaluated its own test slides


def test_fedad_with_linear_probe(
    tmp_path: Path,
    task_identity: None,
) -> None:
    flower, inproc = both(tmp_path, SSL_TINY, "algorithm.name=fedad", "train.rounds=2")
    ids = [f"hospital_{h}/c{c}" for h in (0, 1) for c in (0, 1)]  # 2 per hospital
    run_over_grid(flower, nodes_for(*ids))
    assert_same(flower, inproc, "hospital_2")
    probe = rows(flower, "hospital_2", "eval")[-1]  # the unseen hospital's probe
    assert probe["split"] == "target" and probe["domain"] == "hospital_2"
    assert 0.0 <= probe["macro_f1"] <= 1.0 and probe["n"] > 0
    lam = [r["fit/lambda"] for r in rows(flower, "hospital_2", "round")]
    assert len(lam) == 2  # ATSA's schedule travelled in the round records
