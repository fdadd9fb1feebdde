"""train.class_weights for the MIL methods: one slide per step.

PyTorch's weighted cross-entropy divides by the batch's summed weight, which for a
batch of one slide is the plain loss again; the MIL methods weight each bag's
loss by its class's weight instead (:func:`fedpath.losses.weighted_cross_entropy`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedpath.config import load_config
from fedpath.losses import weighted_cross_entropy
from fedpath.runtime.inprocess import InProcessRun
from tests.mil_helpers import SMALL, TINY, inprocess_run

#: two hospitals split by a label-skewed Dirichlet into clients whose slides are
#: imbalanced, as are the pooled slides (the synthetic hospitals are balanced)
IMBALANCED = [
    *TINY,
    "data.params.num_hospitals=2",
    "data.params.slides_per_hospital=9",
    "partition.mode=label",
    "partition.alpha=0.5",
    "partition.clients_per_domain=2",
]
FEDHD = ["algorithm.params.components=2", "algorithm.params.tokens=20",
         "algorithm.params.iters=10", "algorithm.params.t0=1"]  # fmt: skip
METHODS = {
    "local_mil": [],
    "fedavg_mil": [],
    "pooled_mil": [],
    "fedhd": FEDHD,
    **{k: v for k, v in SMALL.items()},
}


def test_weighted_cross_entropy_formula() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 3, generator=gen)
    y = torch.tensor([0, 2, 2, 1, 0, 2])
    w = torch.tensor([0.5, 2.0, 1.5])
    logp = torch.log_softmax(logits, 1)[torch.arange(6), y]
    assert weighted_cross_entropy(logits, y, w).item() == pytest.approx(
        float(-(w[y] * logp).mean()), rel=1e-6
    )
    assert weighted_cross_entropy(logits, y).item() == pytest.approx(
        F.cross_entropy(logits, y).item(), rel=1e-6
    )
    # a batch of one keeps its weight (PyTorch's weighted mean would not)
    one = logits[:1], y[:1]
    assert F.cross_entropy(*one, weight=w).item() == pytest.approx(
        F.cross_entropy(*one).item(), rel=1e-6
    )
    assert weighted_cross_entropy(*one, w).item() == pytest.approx(
        0.5 * F.cross_entropy(*one).item(), rel=1e-6
    )
    with pytest.raises(ValueError, match="one per class"):
        weighted_cross_entropy(logits, y, torch.ones(2))


def _mil_run(tmp_path: Path, algo: str, *extra: str) -> InProcessRun:
    cfg = load_config(
        None,
        [f"output_dir={tmp_path}", *IMBALANCED, f"algorithm.name={algo}",
         *METHODS[algo], *extra],
    )  # fmt: skip
    return inprocess_run(cfg, tmp_path)


def _trained(run: InProcessRun) -> dict[str, np.ndarray]:
    run.run()
    weights = run.server.global_weights()
    if weights:  # a global model (FedAvg-MIL, pooled, HistoFS)
        return dict(weights)
    return {
        f"{cid}/{k}": v
        for cid, state in sorted(run.states.items())
        for k, v in state.arrays["model"].items()
    }


def test_a_client_bag_loss_is_weighted_by_its_class(tmp_path: Path) -> None:
    run = _mil_run(tmp_path, "local_mil", "train.class_weights=balanced")
    ctx = run.client_half("hospital_0/c1", 1).ctx
    labels = ctx.data.labels
    counts = np.bincount(labels, minlength=2)
    assert counts.min() < counts.max(), "the test needs an imbalanced client"
    w = len(labels) / (2 * counts)
    logits = torch.tensor([[0.3, -0.2]])
    for c in (0, 1):
        y = torch.tensor([c])
        assert ctx.bag_cross_entropy(logits, y).item() == pytest.approx(
            w[c] * F.cross_entropy(logits, y).item(), rel=1e-6
        )


@pytest.mark.parametrize("algo", sorted(METHODS))
def test_every_mil_method_honours_class_weights(tmp_path: Path, algo: str) -> None:
    """The same run with and without ``balanced`` must train differently."""
    plain = _trained(_mil_run(tmp_path / "a", algo))
    weighted = _trained(_mil_run(tmp_path / "b", algo, "train.class_weights=balanced"))
    assert plain and plain.keys() == weighted.keys()
    assert any(not np.allclose(plain[k], weighted[k]) for k in plain)
