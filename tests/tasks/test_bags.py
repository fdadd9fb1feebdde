"""The slide-bag task's local loop (:mod:`fedpath.tasks.bags`)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedpath.config import TrainConfig
from fedpath.evaluation.metrics import classification_metrics
from fedpath.losses import generalized_cross_entropy
from fedpath.mil import build_mil_model, synthetic_bags
from fedpath.mil.bags import SlideBag
from fedpath.mil.models import MILModel
from fedpath.tasks import fit_bags

D, C = 12, 3


def _mil() -> MILModel:
    torch.manual_seed(0)
    return build_mil_model("abmil", D, C, {"hidden": 16, "attn_dim": 8})


def _classifier_weight(model: MILModel) -> torch.Tensor:
    classifier = model.classifier
    assert isinstance(classifier, nn.Linear)
    return classifier.weight


def _toy(n: int) -> list[SlideBag]:
    return synthetic_bags(1, n, dim=D, patches=(30, 40), rare_fraction=0.1).bags


def _loss(model, feats, label, synthetic):  # type: ignore[no-untyped-def]
    out = model(feats, label)
    if synthetic:
        value = generalized_cross_entropy(out.logits, label, 0.7)
        return {"loss": value, "loss_synthetic": value.detach()}
    value = F.cross_entropy(out.logits, label) + out.aux_loss
    return {"loss": value, "loss_real": value.detach()}


def test_bag_loop_curriculum_determinism_and_rng() -> None:
    real = _toy(6)
    syn = [SlideBag(b.slide_id + "-s", b.features, b.label, "x") for b in _toy(4)[:2]]
    cfg = TrainConfig(lr=1e-3, local_epochs=5)
    seen: list[int] = []

    def run(**kw: Any) -> tuple[list[dict[str, float]], torch.Tensor]:
        model = _mil()
        state = torch.get_rng_state()
        hist = fit_bags(model, real, _loss, cfg, synthetic=syn, **kw)
        assert torch.equal(torch.get_rng_state(), state)  # caller's RNG untouched
        assert not model.training
        return hist, _classifier_weight(model).detach().clone()

    h1, w1 = run(synthetic_from=3, on_epoch=lambda e, n: seen.append(e))
    h2, w2 = run(synthetic_from=3)
    assert h1 == h2 and torch.equal(w1, w2) and seen == [1, 2, 3, 4, 5]
    assert [h["synthetic_bags"] for h in h1] == [0, 0, 0, 2, 2]
    assert "loss_synthetic" not in h1[0] and h1[3]["loss_synthetic"] <= 1 / 0.7
    # "loss" averages over every bag of the epoch: (6 real + 2 synthetic) / 8
    e = h1[4]
    assert e["loss"] == pytest.approx(
        (6 * e["loss_real"] + 2 * e["loss_synthetic"]) / 8
    )
    h3, _ = run(synthetic_from=0)
    assert [h["synthetic_bags"] for h in h3] == [2] * 5
    assert not torch.equal(run(synthetic_from=3, seed=1)[1], w1)


def test_bag_loop_learns_and_uses_train_config() -> None:
    ds = synthetic_bags(1, 32, dim=D, patches=(30, 40), rare_fraction=0.1)
    train, test = ds.train_test_split(0.25)
    model = _mil()
    hist = fit_bags(model, train.bags, _loss, TrainConfig(lr=1e-3, local_epochs=20))
    assert hist[-1]["loss"] < 0.5 * hist[0]["loss"]
    from fedpath.mil.predict import evaluate_mil

    probs, labels = evaluate_mil(model, test.bags)
    assert classification_metrics(labels, probs)["balanced_accuracy"] >= 0.85
    # train.* drives the optimizer: weight decay and SGD change the result
    a, b = _mil(), _mil()
    fit_bags(a, train.bags, _loss, TrainConfig(lr=1e-3, local_epochs=1))
    fit_bags(b, train.bags, _loss, TrainConfig(optimizer="sgd", lr=1e-3))
    assert not torch.equal(_classifier_weight(a), _classifier_weight(b))


def test_bag_loop_rejects_other_embedding_spaces() -> None:
    other = [SlideBag("x-syn", torch.randn(5, D + 1), 0, "h")]
    with pytest.raises(ValueError, match="'x-syn' has D=13"):
        fit_bags(_mil(), _toy(2), _loss, TrainConfig(), synthetic=other)


def test_bag_loop_grad_clip_bounds_each_step() -> None:
    real = _toy(4)
    clipped = TrainConfig(lr=1.0, optimizer="sgd", momentum=0.0, grad_clip=1e-3)
    model = _mil()
    before = [p.detach().clone() for p in model.parameters()]
    fit_bags(model, real[:1], _loss, clipped)  # one bag, one step
    with torch.no_grad():
        moved = torch.sqrt(
            sum(
                (
                    ((p - q) ** 2).sum()
                    for p, q in zip(model.parameters(), before, strict=True)
                ),
                torch.zeros(()),
            )
        )
    assert float(moved) <= 1e-3 * 1.0001  # lr x clip norm
