"""``evaluation.adapt_bn``'s blocks: :mod:`fedpath.runtime.adapt_bn` (AdaBN
itself: tests/tasks/test_adapt_bn.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from fedpath.runtime.adapt_bn import adapted_blocks
from fedpath.runtime.averaging import RoundAverage
from fedpath.runtime.evaluate import EvalModel


def running_mean(model: nn.Module) -> torch.Tensor:
    """The running mean of ``model``, a batch-norm layer that tracks it."""
    assert isinstance(model, nn.BatchNorm1d) and model.running_mean is not None
    return model.running_mean


class Task:
    """Adapting sets the running mean to the images' mean; evaluation reads it."""

    def adapt(self, model: nn.Module, images: Any) -> int:
        running_mean(model).fill_(float(np.mean(images)))
        return len(images)

    def evaluate(self, model: nn.Module, split: Any) -> dict[str, float]:
        return {"mean": float(running_mean(model)[0])}


class Dataset:
    def split(self, domain: str, kind: str) -> list[float]:
        return {"train": [1.0, 3.0], "all": [5.0, 7.0, 9.0]}[kind]


def weights(mean: float) -> dict[str, np.ndarray]:
    bn = nn.BatchNorm1d(2)
    running_mean(bn).fill_(mean)
    return {k: v.numpy().copy() for k, v in bn.state_dict().items()}


def test_last_and_averaged_weights_get_adapted_blocks() -> None:
    model = EvalModel(nn.BatchNorm1d(2))
    averager = RoundAverage(1)
    averager.update(1, weights(0.0))
    averager.update(2, weights(2.0))
    final = {"target": {"mean": 2.0}, "averaged": {"rounds": [1, 2]}}
    out = adapted_blocks(
        final,
        weights(2.0),
        task=Task(),  # type: ignore[arg-type]
        model=model,
        dataset=Dataset(),  # type: ignore[arg-type]
        target=("hospital_0", "scored"),  # type: ignore[arg-type]
        eval_split="test",
        selector=None,
        averager=averager,
    )
    # lodo.eval_split test: adapted on the target's train split
    assert out["adapted"] == {
        "on": "target train split",
        "n": 2,
        "target": {"mean": 2.0},
    }
    assert out["averaged"]["rounds"] == [1, 2]
    assert out["averaged"]["adapted"]["n"] == 2
    assert out["target"] == {"mean": 2.0}  # the unadapted blocks stay
    assert "selected" not in out
    # the evaluation model holds the last weights again, unadapted
    assert torch.equal(running_mean(model.module), torch.full((2,), 2.0))


def test_without_a_held_out_split_the_evaluated_images_adapt() -> None:
    model = EvalModel(nn.BatchNorm1d(2))
    out = adapted_blocks(
        {},
        weights(0.0),
        task=Task(),  # type: ignore[arg-type]
        model=model,
        dataset=Dataset(),  # type: ignore[arg-type]
        target=("hospital_0", "scored"),  # type: ignore[arg-type]
        eval_split="all",
        selector=None,
        averager=None,
    )
    assert out == {
        "adapted": {
            "on": "the evaluated target images",
            "n": 3,
            "target": {"mean": 7.0},
        }
    }
