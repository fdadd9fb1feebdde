"""Fine-tuning options of the image loop (:mod:`fedpath.tasks.finetune`):
trainable parts, BatchNorm, learning-rate scale and warmup, augmentation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedpath.config import load_config
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks import ImageTask, make_task
from tests.conftest import tiny_overrides


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
