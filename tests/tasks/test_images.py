"""The image task (:mod:`fedpath.tasks.images`): its local loop, its input-size
check, and test-time augmentation (evaluation.tta: dihedral): the mean softmax over
the 8 flips and turns, in the run's evaluation, in model.fpm and at a new hospital."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedpath.artifact import ArtifactError, LoadedModel, read_model_file
from fedpath.cli import main
from fedpath.config import ConfigError, load_config
from fedpath.data.base import Split, TensorStore
from fedpath.loading import load_model
from fedpath.models.tta import dihedral_views
from fedpath.runtime.experiment import load_dataset, run_dir_for, run_experiment
from fedpath.tasks import ImageTask, make_task
from fedpath.tasks.images import fit_images, predict_probs
from tests.conftest import tiny_overrides


class Corner(nn.Module):
    """A model that is not rotation invariant: logits from one corner pixel."""

    num_classes = 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x[:, 0, 0, 0]
        return torch.stack([v * 4, -v * 4], 1)


def _split(n: int = 6, size: int = 8) -> Split:
    g = torch.Generator().manual_seed(0)
    imgs = torch.randint(0, 256, (n, 3, size, size), generator=g, dtype=torch.uint8)
    store = TensorStore(imgs)
    zeros = np.zeros(n, dtype=np.int64)
    return Split(store, np.arange(n), zeros, np.array(["d"] * n), np.array(["s"] * n))


def test_tta_is_the_mean_softmax_over_the_views_and_turn_invariant() -> None:
    split, model = _split(), Corner()
    plain = predict_probs(model, split, 4, torch.device("cpu"))
    tta = predict_probs(model, split, 4, torch.device("cpu"), "dihedral")
    x = split.load(np.arange(len(split))).float() / 255.0
    want = torch.stack([torch.softmax(model(v), 1) for v in dihedral_views(x)]).mean(0)
    torch.testing.assert_close(tta, want)
    assert not torch.allclose(plain, tta)  # the corner model is not invariant
    turned = Split(
        TensorStore(torch.rot90(split.store.load(np.arange(len(split))), 1, (2, 3))),
        split.indices, split.labels, split.domains, split.slides,
    )  # fmt: skip
    again = predict_probs(model, turned, 4, torch.device("cpu"), "dihedral")
    torch.testing.assert_close(again, tta)  # a turned image: the same prediction


def test_a_run_with_tta_evaluates_and_exports_with_it(tmp_path: Path) -> None:
    over = tiny_overrides(
        tmp_path,
        "train.rounds=1",
        "lodo.targets=[hospital_2]",
        "evaluation.tta=dihedral",
    )
    cfg = load_config(None, over)
    run_experiment(cfg)
    run_dir = run_dir_for(cfg, "hospital_2", 0)
    final = json.loads((run_dir / "final.json").read_text())["evaluation"]["target"]
    meta, _ = read_model_file(run_dir / "model.fpm")
    assert meta.tta == "dihedral"
    model = load_model(run_dir / "model.fpm")
    assert isinstance(model, LoadedModel)
    ds = load_dataset(cfg.data)
    split = ds.split("hospital_2", cfg.lodo.eval_split)
    images = split.load(np.arange(len(split)))
    probs = model.predict_proba(images)
    want = predict_probs(model.model, split, 64, torch.device("cpu"), "dihedral")
    np.testing.assert_allclose(probs, want.numpy(), atol=1e-6)
    # fedpath evaluate at a "new hospital" uses the file's tta: the run's numbers
    out = tmp_path / "m.json"
    data_over = [o for o in over if o.startswith("data.")]
    assert main(["evaluate", str(run_dir / "model.fpm"), "synthetic:hospital_2",
                 *data_over, "--out", str(out), "-q"]) == 0  # fmt: skip
    got = json.loads(out.read_text())
    assert got["auroc"] == pytest.approx(final["auroc"], abs=1e-9)


def test_tta_needs_views_to_average(tmp_path: Path) -> None:
    extra = ("evaluation.tta=dihedral", "train.cache_features=true")
    base = tiny_overrides(tmp_path, *extra, "train.trainable=classifier")
    with pytest.raises(ConfigError, match="evaluation.tta"):
        load_config(None, [*base, "train.augment=none"])
    with pytest.raises(ConfigError, match="evaluation.tta"):
        load_config(None, [*tiny_overrides(tmp_path), "evaluation.tta=yes"])


def test_a_model_file_with_an_unknown_tta_is_refused() -> None:
    from fedpath.artifact import LoadedModel, ModelMeta

    meta = ModelMeta("small_cnn", {"widths": [4]}, ["a", "b"], 8, [0.5] * 3, [0.5] * 3)
    meta.tta = "ten_crop"
    with pytest.raises(ArtifactError, match="tta must be"):
        LoadedModel(meta, {})


def test_tta_on_cached_views_averages_the_stored_views() -> None:
    from fedpath.data.features import FeatureStore

    g = torch.Generator().manual_seed(1)
    feats = torch.randn(5, 8, 3, generator=g)  # 5 images x 8 cached views x D 3
    store = FeatureStore(feats, image_size=32, views=8)
    zeros = np.zeros(5, dtype=np.int64)
    split = Split(store, np.arange(5), zeros, np.array(["d"] * 5), np.array(["s"] * 5))
    head = nn.Linear(3, 2)
    got = predict_probs(head, split, 2, torch.device("cpu"), "dihedral")
    with torch.no_grad():
        want = torch.softmax(head(feats), -1).mean(1)
    torch.testing.assert_close(got, want)
    plain = predict_probs(head, split, 2, torch.device("cpu"))  # view 0 only
    with torch.no_grad():
        torch.testing.assert_close(plain, torch.softmax(head(feats[:, 0]), -1))
    one = Split(FeatureStore(feats[:, 0], 32), *(split.indices, split.labels),
                split.domains, split.slides)  # fmt: skip
    with pytest.raises(ValueError, match="one view of each sample"):
        predict_probs(head, one, 2, torch.device("cpu"), "dihedral")


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


def _soft_run(root: Path, out: Path, share: str | None, *extra: str) -> dict:
    """Final weights of a tiny manifest run (``share``: every row's agreement,
    or 2/3 on every third row when "mixed"; None: no column asked for)."""
    import csv

    from tests.fixtures import write_manifest_tree

    if not (root / "manifest.csv").exists():
        write_manifest_tree(root)
    path = root / "manifest.csv"
    rows = list(csv.DictReader(path.open()))
    for i, row in enumerate(rows):
        mixed = "0.6667" if i % 3 == 0 else "1.0"
        row["agreement"] = mixed if share == "mixed" else (share or "1.0")
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    asked = [] if share is None else ["data.params.agreement=agreement"]
    tiny = [o for o in tiny_overrides(out) if not o.startswith("data.params.")]
    cfg = load_config(
        None,
        [
            *tiny,
            "data.name=manifest",
            f"data.root={root}",
            "data.params.image_size=32",
            "lodo.targets=[site2]",
            "train.rounds=1",
            *asked,
            *extra,
        ],
    )
    run_experiment(cfg)
    return read_model_file(run_dir_for(cfg, "site2", 0) / "model.fpm")[1]


def test_soft_labels_train_on_the_agreement_and_unanimous_ones_as_hard_labels(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    soft = ["train.soft_labels=agreement", "train.class_weights=balanced"]
    hard = _soft_run(data, tmp_path / "hard", None, "train.class_weights=balanced")
    unanimous = _soft_run(data, tmp_path / "unanimous", "1.0", *soft)
    split = _soft_run(data, tmp_path / "split", "mixed", *soft)
    for name, w in hard.items():
        torch.testing.assert_close(unanimous[name], w, rtol=1e-4, atol=1e-5)
    assert any(not torch.allclose(split[n], w, atol=1e-4) for n, w in hard.items())
    # pooled training: the uploads carry the agreement with the labels
    pooled = ["algorithm.name=central_supervised", "algorithm.params={}"]
    hard = _soft_run(data, tmp_path / "p_hard", None, *pooled)
    split = _soft_run(data, tmp_path / "p_split", "mixed", *soft[:1], *pooled)
    assert any(not torch.allclose(split[n], w, atol=1e-4) for n, w in hard.items())


def test_soft_labels_without_agreement_or_for_multi_view_losses_are_refused(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with pytest.raises(ConfigError, match="train.soft_labels': 'agreement' needs"):
        _soft_run(data, tmp_path / "a", None, "train.soft_labels=agreement")
    with pytest.raises(
        ConfigError, match=r"classifies \d+ inputs per batch of \d+ samples"
    ):
        _soft_run(
            data,
            tmp_path / "b",
            "mixed",
            "train.soft_labels=agreement",
            "algorithm.name=fedstain",
        )


def test_mixup_and_balanced_sampling_change_training_and_repeat_exactly(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    plain = _soft_run(data, tmp_path / "plain", None)
    for i, option in enumerate(["train.mixup=0.4", "train.sampling=balanced"]):
        once = _soft_run(data, tmp_path / f"a{i}", None, option)
        twice = _soft_run(data, tmp_path / f"b{i}", None, option)
        for name, w in once.items():
            torch.testing.assert_close(twice[name], w)  # seeded: the same run
        assert any(not torch.allclose(once[n], w, atol=1e-4) for n, w in plain.items())
    with pytest.raises(ConfigError, match=r"classifies \d+ inputs per batch"):
        _soft_run(
            data, tmp_path / "c", None, "train.mixup=0.4", "algorithm.name=fedstain"
        )
