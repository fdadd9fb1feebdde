"""The training tasks: one local loop per data kind, model building, evaluation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedpath.config import TrainConfig, load_config
from fedpath.evaluation.metrics import classification_metrics
from fedpath.losses import generalized_cross_entropy
from fedpath.mil import build_mil_model, synthetic_bags
from fedpath.mil.bags import SlideBag
from fedpath.mil.models import MILModel
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks import BagTask, ImageTask, TaskMismatch, fit_bags, make_task
from fedpath.tasks.images import fit_images
from tests.conftest import tiny_overrides

D, C = 12, 3


def _mil() -> MILModel:
    torch.manual_seed(0)
    return build_mil_model("abmil", D, C, {"hidden": 16, "attn_dim": 8})


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

    def run(**kw):  # type: ignore[no-untyped-def]
        model = _mil()
        state = torch.get_rng_state()
        hist = fit_bags(model, real, _loss, cfg, synthetic=syn, **kw)
        assert torch.equal(torch.get_rng_state(), state)  # caller's RNG untouched
        assert not model.training
        return hist, model.classifier.weight.detach().clone()  # type: ignore[union-attr]

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
    assert not torch.equal(a.classifier.weight, b.classifier.weight)  # type: ignore[union-attr]


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
                ((p - q) ** 2).sum()
                for p, q in zip(model.parameters(), before, strict=True)
            )
        )
    assert float(moved) <= 1e-3 * 1.0001  # lr x clip norm


def test_image_loop_steps_epochs_and_nonfinite_loss(tmp_path: Path) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path, "train.local_epochs=2"))
    ds = load_dataset(cfg.data)
    task = make_task(cfg, ds)
    assert isinstance(task, ImageTask) and task.images() is task
    data = ds.split(ds.domains[0], "train")
    seen: list[tuple[int, int]] = []
    calls = []

    def ce(m, x, y):  # type: ignore[no-untyped-def]
        calls.append(x.shape[0])
        assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0  # images in [0, 1]
        return {"loss": F.cross_entropy(m(x), y), "extra": 2.0}

    model = task.build_model()
    out = task.fit(
        model, data, ce, round_idx=1, seed=0, on_epoch=lambda e, n: seen.append((e, n))
    )
    assert seen == [(1, 2), (2, 2)] and out["extra"] == pytest.approx(2.0)
    assert sum(calls) == 2 * (len(data) - (len(data) % 16 == 1))
    with pytest.raises(FloatingPointError, match="lower train.lr"):
        fit_images(
            task.build_model(), data, lambda m, x, y: {"loss": m(x).sum() * math.inf},
            cfg.train, round_idx=1, seed=0, device=torch.device("cpu"),
        )  # fmt: skip


def test_tasks_pick_by_data_kind_and_refuse_the_other_kind(tmp_path: Path) -> None:
    from tests.algorithms.test_fedhd import TINY as BAGS

    images = load_config(None, tiny_overrides(tmp_path))
    bags = load_config(None, [*BAGS, "algorithm.name=local_mil"])
    bag_task_ds = load_dataset(bags.data)
    bag_task = make_task(bags, bag_task_ds)
    assert isinstance(bag_task, BagTask) and bag_task.bags() is bag_task
    with pytest.raises(TaskMismatch, match="trains on images, but dataset"):
        bag_task.images()
    with pytest.raises(TaskMismatch, match="algorithms for bags: .*fedhd"):
        make_task(load_config(None, [*BAGS, "algorithm.name=fedavg"]), bag_task_ds)
    with pytest.raises(TaskMismatch, match="algorithms for images: .*fedavg"):
        make_task(
            load_config(None, tiny_overrides(tmp_path, "algorithm.name=fedhd")),
            load_dataset(images.data),
        )
    with pytest.raises(Exception, match="linear_probe' needs an image dataset"):
        bag_task.encode(
            bag_task.build_model(), load_dataset(bags.data).split("hospital_0", "test")
        )


def test_task_evaluate_equals_metrics_of_predict(tmp_path: Path) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path))
    ds = load_dataset(cfg.data)
    task = make_task(cfg, ds)
    split = ds.split(ds.domains[1], "test")
    model = task.build_model()
    probs = task.predict(model, split)
    assert probs.dtype == np.float64 and probs.shape == (len(split), ds.num_classes)
    expected = {**classification_metrics(split.labels, probs), "n": len(split)}
    got = task.evaluate(model, split)
    assert set(got) == set(expected)
    for k, v in expected.items():
        assert got[k] == v or (
            isinstance(v, float) and math.isnan(v) and math.isnan(got[k])
        )


def test_class_weight_formula(tmp_path: Path) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path, "train.class_weights=balanced"))
    task = make_task(cfg, load_dataset(cfg.data))
    w = task.class_weight(np.array([0, 0, 0, 1]))
    assert w is not None
    assert w.tolist() == pytest.approx([4 / (2 * 3), 4 / (2 * 1)])
    assert task.class_weight(np.array([1, 1])).tolist() == pytest.approx(
        [0.0, 2 / (2 * 2)]
    )


def test_image_task_refuses_images_smaller_than_the_encoder_takes(
    tmp_path: Path,
) -> None:
    cfg = load_config(
        None,
        tiny_overrides(
            tmp_path,
            "data.params.image_size=16",
            "model.backbone=efficientnet_lite0",
            "model.params={pretrained: false}",
        ),
    )
    task = make_task(cfg, load_dataset(cfg.data))
    with pytest.raises(Exception, match=r"data.params.image_size.*at least 32 px"):
        task.build_model()


def _fit_once(tmp_path: Path, *extra: str, opt_params: bool = False):  # type: ignore[no-untyped-def]
    cfg = load_config(None, tiny_overrides(tmp_path, *extra))
    ds = load_dataset(cfg.data)
    task = make_task(cfg, ds)
    assert isinstance(task, ImageTask)
    torch.manual_seed(0)
    model = task.build_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def ce(m, x, y):  # type: ignore[no-untyped-def]
        return {"loss": F.cross_entropy(m(x), y)}

    task.fit(
        model,
        ds.split(ds.domains[0], "train"),
        ce,
        round_idx=1,
        seed=3,
        opt_params=model.parameters() if opt_params else None,
    )
    return before, model.state_dict()


def test_default_finetuning_equals_one_plain_parameter_group(tmp_path: Path) -> None:
    """trainable=all (two parameter groups: encoder, head) is bit-identical to one
    group of all parameters, so adding the options changed no result."""
    _, grouped = _fit_once(tmp_path)
    _, plain = _fit_once(tmp_path, opt_params=True)
    assert all(torch.equal(grouped[k], plain[k]) for k in grouped)


def test_frozen_encoder_and_last_stages_and_frozen_bn(tmp_path: Path) -> None:
    before, after = _fit_once(tmp_path, "train.trainable=classifier")
    enc = [k for k in before if k.startswith("encoder.")]
    assert all(torch.equal(before[k], after[k]) for k in enc)  # weights and BN stats
    assert not torch.equal(before["classifier.weight"], after["classifier.weight"])
    before, after = _fit_once(
        tmp_path, "train.trainable=last_stages", "train.trainable_stages=1"
    )
    last = [k for k in enc if k.startswith("encoder.stages.1.") and "weight" in k]
    first = [k for k in enc if k.startswith("encoder.stages.0.")]
    assert any(not torch.equal(before[k], after[k]) for k in last)
    assert all(torch.equal(before[k], after[k]) for k in first)
    before, after = _fit_once(tmp_path, "train.bn=frozen")
    stats = [k for k in before if k.endswith(("running_mean", "running_var"))]
    assert stats and all(torch.equal(before[k], after[k]) for k in stats)
    assert not torch.equal(
        before["encoder.stages.0.0.weight"], after["encoder.stages.0.0.weight"]
    )
    with pytest.raises(Exception, match="train.trainable_stages': 5 is more than"):
        _fit_once(tmp_path, "train.trainable=last_stages", "train.trainable_stages=5")


def test_encoder_lr_scale_and_warmup_schedule(tmp_path: Path) -> None:
    from fedpath.tasks.base import lr_at

    cfg = load_config(
        None, tiny_overrides(tmp_path, "train.warmup=0.25", "train.lr=0.01")
    ).train
    assert lr_at(cfg, 0.0) == 0.0
    assert lr_at(cfg, 0.125) == pytest.approx(0.005)
    assert lr_at(cfg, 0.5) == pytest.approx(0.01)
    # encoder_lr_scale=0 leaves the encoder untouched, the head still learns
    before, after = _fit_once(tmp_path, "train.encoder_lr_scale=0", "train.bn=frozen")
    w = [k for k in before if k.startswith("encoder.") and k.endswith("weight")]
    assert all(torch.equal(before[k], after[k]) for k in w)
    assert not torch.equal(before["classifier.weight"], after["classifier.weight"])


def test_dihedral_augmentation_is_a_symmetry_and_seeded() -> None:
    from fedpath.tasks.finetune import augment_batch, augment_generator

    x = torch.rand(16, 3, 8, 8)
    a = augment_batch(x, "dihedral", augment_generator(1))
    b = augment_batch(x, "dihedral", augment_generator(1))
    assert torch.equal(a, b) and not torch.equal(a, x)
    for i in range(16):  # each output is one of the 8 symmetries of its input
        options = [
            torch.rot90(x[i].flip(-1) if f else x[i], k, dims=(-2, -1))
            for f in (0, 1)
            for k in range(4)
        ]
        assert any(torch.equal(a[i], o) for o in options)
    j = augment_batch(x, "dihedral_jitter", augment_generator(1))
    assert float(j.min()) >= 0.0 and float(j.max()) <= 1.0
    assert not torch.equal(j, a)
    assert augment_batch(x, "none", augment_generator(1)) is x


@pytest.mark.parametrize("option", ["train.trainable=classifier", "train.bn=frozen"])
def test_fedbn_refuses_fixed_normalization_layers(tmp_path: Path, option: str) -> None:
    from fedpath.runtime.experiment import run_experiment

    cfg = load_config(
        None, tiny_overrides(tmp_path, "algorithm.name=fedbn", option, "train.rounds=1")
    )
    key = option.split("=")[0]
    with pytest.raises(Exception, match=f"config key '{key}'.*fedbn"):
        run_experiment(cfg)
