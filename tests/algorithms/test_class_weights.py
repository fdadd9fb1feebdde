"""train.class_weights: balanced cross-entropy for imbalanced hospitals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.config import ConfigError, load_config
from fedpath.data.partition import lodo_plan
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.inprocess import InProcessRun

TINY = [
    "data.params.samples_per_hospital=24",
    "data.params.image_size=16",
    "data.params.num_hospitals=3",
    "data.params.tumour_fraction=0.25",
    "model.params.widths=[4, 8]",
    "partition.clients_per_domain=1",
    "partition.mode=iid",
    "lodo.targets=[hospital_0]",
    "train.rounds=1",
    "train.batch_size=8",
    "runtime.threads=1",
]


def _run(tmp_path: Path, *extra: str) -> InProcessRun:
    cfg = load_config(None, [f"output_dir={tmp_path}", *TINY, *extra])
    ds = load_dataset(cfg.data)
    (fold,) = lodo_plan(ds, cfg.lodo.targets)
    return InProcessRun(cfg, ds, fold, 0, tmp_path / "run")


def test_balanced_weights_follow_the_formula(tmp_path: Path) -> None:
    run = _run(tmp_path, "train.class_weights=balanced")
    ctx = run.client_half("hospital_1/c0", 1).ctx
    labels = ctx.data.labels
    counts = np.bincount(labels, minlength=2)
    w = ctx.class_weight()
    assert w is not None
    expected = len(labels) / (2 * counts)
    assert np.allclose(w.numpy(), expected)
    # weighted mean of -log p_y with weights w_y (PyTorch's weighted reduction)
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(10, 2, generator=gen)
    y = torch.tensor([0, 1, 1, 0, 0, 0, 1, 0, 0, 0])
    logp = torch.log_softmax(logits, 1)[torch.arange(10), y]
    wy = torch.as_tensor(expected, dtype=torch.float32)[y]
    slow = float(-(wy * logp).sum() / wy.sum())
    assert ctx.cross_entropy(logits, y).item() == pytest.approx(slow, rel=1e-6)


def test_default_is_plain_cross_entropy_and_balanced_changes_training(
    tmp_path: Path,
) -> None:
    plain = _run(tmp_path / "a")
    assert plain.client_half("hospital_1/c0", 1).ctx.class_weight() is None
    plain.run()
    weighted = _run(tmp_path / "b", "train.class_weights=balanced")
    weighted.run()
    a, b = plain.server.global_weights(), weighted.server.global_weights()
    assert a is not None and b is not None
    assert any(not np.allclose(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "algorithm", ["fedprox", "fedbn", "fedccrl", "fedstain", "fedalign", "strap"]
)
def test_every_supervised_image_method_honours_class_weights(
    tmp_path: Path, algorithm: str
) -> None:
    """The same run with and without ``balanced`` must train differently."""
    extra = f"algorithm.name={algorithm}"
    plain = _run(tmp_path / "a", extra)
    plain.run()
    weighted = _run(tmp_path / "b", extra, "train.class_weights=balanced")
    weighted.run()
    a, b = plain.server.global_weights(), weighted.server.global_weights()
    assert a is not None and b is not None
    assert any(not np.allclose(a[k], b[k]) for k in a)


def test_bad_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match="train.class_weights"):
        load_config(None, ["train.class_weights=inverse"])
