"""Shared by the slide-bag tests: tiny FedHD and baseline runs, small MIL pieces."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from fedpath.config import ExperimentConfig, load_config
from fedpath.data.partition import lodo_plan
from fedpath.mil import build_mil_model, synthetic_bags
from fedpath.mil.bags import SlideBag
from fedpath.mil.models import MILModel
from fedpath.runtime.audit import audit
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.inprocess import InProcessRun

# ------------------------------------------------------------------ FedHD runs

TINY = [
    "data.name=synthetic_bags",
    "data.params.num_hospitals=3",
    "data.params.slides_per_hospital=8",
    "data.params.dim=8",
    "data.params.min_patches=30",
    "data.params.max_patches=50",
    "data.params.rare_fraction=0.1",
    "data.params.test_fraction=0.25",
    "partition.clients_per_domain=1",
    "partition.mode=iid",
    "lodo.targets=none",
    "evaluation.protocol=local",
    "model.backbone=abmil",
    "model.params.hidden=16",
    "model.params.attn_dim=8",
    "train.rounds=1",
    "train.local_epochs=3",
    # CLAM's Adam(lr 2e-4, weight decay 1e-5), the MIL methods' defaults in the papers
    "train.lr=0.0002",
    "train.weight_decay=0.00001",
    "runtime.threads=1",
]
FEDHD = [
    "algorithm.name=fedhd",
    "algorithm.params.components=4",
    "algorithm.params.tokens=20",
    "algorithm.params.iters=10",
    "algorithm.params.t0=1",
]
#: the option that refuses clients in different embedding spaces (the default,
#: ``adapt``, trains the same numbers when every client is in one space)
SAME = "algorithm.params.spaces=same"


def tiny(tmp_path: Path, *extra: str) -> ExperimentConfig:
    return load_config(None, [f"output_dir={tmp_path}", *TINY, *extra])


def inprocess_run(cfg: ExperimentConfig, tmp_path: Path) -> InProcessRun:
    ds = load_dataset(cfg.data)
    (fold,) = lodo_plan(ds, cfg.lodo.targets)
    return InProcessRun(cfg, ds, fold, 0, tmp_path / "run")


# ------------------------------------------------------------------ baselines

SMALL = {
    "fedhe": [],
    "desa": [
        "algorithm.params.anchors_per_class=2",
        "algorithm.params.tokens=20",
        "algorithm.params.iters=10",
    ],
    "histofs": [],
    "feddgm": ["algorithm.params.components=2", "algorithm.params.tokens=20"],
}
#: what each baseline's clients may send, per stage
UPLOADS = {
    "fedhe": {"fit": {"class_logits"}},
    "desa": {"distill": {"synthetic"}, "fit": {"anchor_logits"}},
    "histofs": {"stats": {"styles"}, "fit": {"weights"}},
    "feddgm": {"distill": {"synthetic"}, "fit": set()},
}


def tiny_baseline(tmp_path: Path, algo: str, *extra: str) -> ExperimentConfig:
    return load_config(
        None,
        [f"output_dir={tmp_path}", *TINY, f"algorithm.name={algo}", *SMALL[algo],
         *extra],
    )  # fmt: skip


def check_clean_run(run: InProcessRun, rec: dict[str, Any], algo: str) -> None:
    """Every client's metrics in range, the audit clean, and only ``algo``'s
    groups sent at each stage."""
    for m in rec["evaluation"]["clients"].values():
        assert 0.0 <= m["accuracy"] <= 1.0 and m["n"] >= 2
    _, findings = audit(run.run_dir)
    assert findings == []
    sent: dict[str, set[str]] = {}
    for line in (run.run_dir / "traffic.jsonl").open():
        r = json.loads(line)
        sent.setdefault(r["stage"], set()).update(g for g, *_ in r["sent"] or [])
    assert sent == UPLOADS[algo]


# ------------------------------------------------------------------ spaces

#: hospital_0 keeps the dataset's space (D = 8); the others are other "extractors"
SPACES = (
    "algorithm.params.features={hospital_1: {project: 5}, "
    "hospital_2: {project: 12, seed: 3, nonlinear: true}}"
)
OWN = {"hospital_0/c0": ("synthetic", 8), "hospital_1/c0": ("project5-s0", 5)}
OWN["hospital_2/c0"] = ("project12-s3", 12)
#: the baselines across the three spaces of :data:`SPACES`, hospital_2 a TransMIL
ADAPT = [
    SPACES,
    "algorithm.params.spaces=adapt",
    "algorithm.params.models={hospital_2: transmil}",
    "algorithm.params.model_params={transmil: {hidden: 16, landmarks: 4}}",
]


def same_metrics(run_metrics: dict[str, Any], ours: dict[str, Any]) -> None:
    """Every metric of the run's record equals ours (to 1e-9; null: undefined)."""
    assert run_metrics, "the run recorded no metrics"
    for key, value in run_metrics.items():
        got = ours[key]
        if value is None or (isinstance(value, float) and math.isnan(value)):
            assert got is None or math.isnan(got), key
        elif isinstance(value, int | float):
            assert got == pytest.approx(value, abs=1e-9), key
        else:
            assert got == value, key


# ------------------------------------------------------------------ MIL pieces

#: the embedding dimension and number of classes of the small MIL models
D, C = 12, 3
#: small sizes of each registered MIL model
MIL_SMALL = {
    "abmil": {"hidden": 16, "attn_dim": 8},
    "clam_sb": {"hidden": 16, "attn_dim": 8},
    "clam_mb": {"hidden": 16, "attn_dim": 8},
    "acmil": {"hidden": 16, "attn_dim": 8, "n_token": 3},
    "transmil": {"hidden": 16, "heads": 2, "landmarks": 8, "residual_kernel": 5},
}


def small_mil(name: str, **extra: object) -> MILModel:
    torch.manual_seed(0)
    return build_mil_model(name, D, C, {**MIL_SMALL[name], **extra})


def toy_bags(n_slides: int = 12) -> list[SlideBag]:
    ds = synthetic_bags(1, n_slides, dim=D, patches=(30, 40), rare_fraction=0.1)
    return ds.bags


def pairs(
    n: int = 48, dim: int = 8, size: int = 16
) -> tuple[torch.Tensor, torch.Tensor]:
    """Patches whose colour and brightness are a linear function of the embedding."""
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(n, dim, generator=gen)
    colour = torch.sigmoid(z[:, :3])[:, :, None, None]
    ramp = torch.linspace(0.5, 1.0, size)[None, None, None, :]
    x = (colour * ramp).expand(n, 3, size, size) * 255
    return z, x.round().to(torch.uint8)


def blobs(n: int = 600, d: int = 4, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    centres = 5 * torch.randn(4, d, generator=gen, dtype=torch.float64)
    z = torch.randint(4, (n,), generator=gen)
    scale = 0.3 + torch.rand(4, d, generator=gen, dtype=torch.float64)
    return centres[z] + scale[z] * torch.randn(n, d, generator=gen, dtype=torch.float64)
