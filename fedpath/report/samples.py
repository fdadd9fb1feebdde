"""Test images of a run's domains, for the figures that look at a model: the
unseen domain's evaluation split and each source's test split, the same images
for every method of an experiment (seeded)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedpath.report.runs import Run


@dataclass
class Samples:
    """``images`` uint8 (N, 3, H, W) with their ``labels``, ``domains`` and
    whether each comes from the unseen domain (``unseen``)."""

    images: torch.Tensor
    labels: np.ndarray
    domains: np.ndarray
    unseen: np.ndarray
    class_names: list[str]
    target: str


_DATASETS: dict[str, Any] = {}


def run_dataset(run: Run) -> Any:
    """The dataset of ``run``'s ``config.yaml``, loaded once for every figure of
    an experiment (raises the dataset's own error when its data is not here)."""
    from fedpath.config import build_config
    from fedpath.runtime.experiment import load_dataset

    cfg = build_config(run.config)
    key = repr(cfg.data)
    if key not in _DATASETS:
        _DATASETS.clear()  # one dataset at a time: they can be large
        _DATASETS[key] = load_dataset(cfg.data)
    return _DATASETS[key]


def run_samples(run: Run, per_domain: int, seed: int) -> Samples:
    """Up to ``per_domain`` images of each domain of ``run``'s fold (raises the
    dataset's own error when its data is not on this machine)."""
    from fedpath.config import build_config
    from fedpath.data.partition import lodo_plan

    cfg = build_config(run.config)
    ds = run_dataset(run)
    # a consortium run (target "none") holds nothing out: its sources only
    targets: str | list[str] = "none" if run.target == "none" else [run.target]
    probe = [] if run.target == "none" else cfg.evaluation.probe_train
    fold = next(
        f
        for f in lodo_plan(ds, targets, probe, cfg.lodo.sources)
        if f.target == run.target
    )
    held = [] if fold.target == "none" else [fold.target]
    rng = np.random.default_rng(seed)
    parts = []
    for domain in [*fold.sources, *held]:
        split = ds.split(
            domain, cfg.lodo.eval_split if domain == fold.target else "test"
        )
        if not len(split):
            continue
        take = np.sort(
            rng.choice(len(split), size=min(per_domain, len(split)), replace=False)
        )
        parts.append((split.subset(take), domain == fold.target))
    images = torch.cat([s.load(np.arange(len(s))) for s, _ in parts])
    return Samples(
        images,
        np.concatenate([s.labels for s, _ in parts]),
        np.concatenate([s.domains for s, _ in parts]).astype(str),
        np.concatenate([np.full(len(s), u) for s, u in parts]),
        list(ds.classes),
        run.target,
    )
