"""The frozen-feature fast path (train.cache_features): encode once, train heads."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from functools import partial
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from fedpath.artifact import LoadedModel
from fedpath.config import ConfigError, TrainConfig, load_config
from fedpath.data.base import DataError, DomainDataset, Split, TensorStore
from fedpath.data.features import FEATURES, FeatureStore
from fedpath.data.files import FileStore
from fedpath.loading import load_model
from fedpath.models.backbones import FedModel, build_model
from fedpath.runtime.experiment import load_dataset, run_experiment
from fedpath.tasks import FeatureTask, TaskMismatch, make_task, prepare_dataset
from fedpath.tasks import features as feature_path
from fedpath.tasks.images import fit_images
from fedpath.utils.progress import Reporter
from tests.conftest import tiny_overrides
from tests.fixtures import write_manifest_tree


def _weights(tmp_path: Path, seed: int = 3) -> Path:
    """A 'pretrained' small CNN: fixed weights in a local file."""
    cfg = load_config(None, tiny_overrides(tmp_path))
    torch.manual_seed(seed)
    path = tmp_path / f"encoder{seed}.pt"
    torch.save(build_model(cfg.model, 3).state_dict(), path)
    return path


def _cfg(tmp_path: Path, *extra: str, weights: Path | None = None):  # type: ignore[no-untyped-def]
    w = weights or _weights(tmp_path)
    return load_config(
        None,
        tiny_overrides(
            tmp_path,
            f"model.weights={w}",
            "train.trainable=classifier",
            "train.cache_features=true",
            *extra,
        ),
    )


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    """Each test sees the disk cache, not what an earlier test encoded."""
    feature_path._ENCODED.clear()
    feature_path._PREPARED.clear()


def test_run_trains_the_head_on_cached_features_and_exports_the_image_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg(tmp_path, "train.rounds=4")
    records = run_experiment(cfg)
    cached = list((tmp_path / "feature_cache").glob("*.h5"))
    assert len(cached) == 1
    images = load_dataset(cfg.data)
    with h5py.File(cached[0], "r") as fh:
        feats = np.asarray(fh[FEATURES][:])
        assert fh.attrs["backbone"] == "small_cnn"
    # one embedding per image, equal to the frozen encoder's (eval mode)
    full = build_model(cfg.model, images.num_classes).eval()
    with torch.no_grad():
        x = images.store.load(np.arange(5)).float() / 255
        np.testing.assert_allclose(feats[:5], full.encode(x).numpy(), atol=1e-5)
    assert feats.shape[0] == len(images.store)

    # only the classifier travels: the run's weights are the head's two entries
    ckpt = torch.load(
        next(tmp_path.rglob("checkpoint.pt")), map_location="cpu", weights_only=False
    )
    assert "classifier.weight" in json.dumps(list(_keys(ckpt)))
    assert not any(k.startswith("encoder.") for k in _keys(ckpt))

    # model.fpm is the full image model; its logits on pixels are the head's
    # logits on the cached features, and it reproduces the run's target metrics
    fpm = next(tmp_path.rglob("model.fpm"))
    loaded = load_model(fpm)
    assert isinstance(loaded, LoadedModel) and isinstance(loaded.model, FedModel)
    test = images.split(records[0]["target"], cfg.lodo.eval_split).indices
    with torch.no_grad():
        x = images.store.load(np.asarray(test)).float() / 255
        logits = loaded.model(x)
        head = loaded.model.classifier(torch.from_numpy(feats[test]))
    np.testing.assert_allclose(logits.numpy(), head.numpy(), atol=1e-4)
    acc = float((logits.argmax(1).numpy() == images.labels[test]).mean())
    assert acc == pytest.approx(records[0]["evaluation"]["target"]["accuracy"])

    # a second run reads the cache instead of encoding again
    feature_path._ENCODED.clear()
    feature_path._PREPARED.clear()

    def no_encoding(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("encoded again despite the cache")

    monkeypatch.setattr(feature_path, "encode_all", no_encoding)
    again = dataclasses.replace(cfg, name="again")
    assert run_experiment(again)[0]["evaluation"]["target"] == pytest.approx(
        records[0]["evaluation"]["target"]
    )


def _keys(ckpt: object) -> list[str]:
    """Every state_dict-like key of a checkpoint (nested dicts flattened)."""
    out: list[str] = []
    if isinstance(ckpt, dict):
        for k, v in ckpt.items():
            if isinstance(k, str) and "." in k and not isinstance(v, dict):
                out.append(k)
            out.extend(_keys(v))
    elif isinstance(ckpt, list | tuple):
        for v in ckpt:
            out.extend(_keys(v))
    elif hasattr(ckpt, "arrays"):
        out.extend(_keys(ckpt.arrays))
    return out


def test_one_local_fit_on_features_equals_the_frozen_encoder_fit(
    tmp_path: Path,
) -> None:
    """The fast path is the same training: a classifier fitted on cached features
    equals the classifier of the full model fitted on pixels with its encoder
    frozen (same start, same shuffles)."""
    cfg = _cfg(tmp_path, "train.lr=0.01", "train.local_epochs=2")
    images = load_dataset(cfg.data)
    feats = prepare_dataset(cfg, images)
    task = make_task(cfg, feats)
    assert isinstance(task, FeatureTask)
    n = 40
    split_px = Split(
        images.store,
        np.arange(n),
        images.labels[:n],
        images.domain_of[:n],
        images.slide_of[:n],
    )
    split_f = Split(feats.store, *[getattr(split_px, f) for f in _FIELDS])
    full = build_model(cfg.model, images.num_classes)
    head = task.build_model()
    head.load_state_dict(
        {k: v for k, v in full.state_dict().items() if k.startswith("classifier.")}
    )

    def ce(model, x, y):  # type: ignore[no-untyped-def]
        return {"loss": torch.nn.functional.cross_entropy(model(x), y)}

    frozen = dataclasses.replace(cfg.train, cache_features=False)
    fit = partial(fit_images, round_idx=1, seed=7, device=torch.device("cpu"))
    fit(full, split_px, ce, frozen)
    fit(head, split_f, ce, task.loop_train)
    torch.testing.assert_close(
        full.classifier.weight, head.classifier.weight, atol=1e-5, rtol=1e-4
    )
    assert not torch.equal(head.classifier.weight, task.build_model().classifier.weight)


_FIELDS = ("indices", "labels", "domains", "slides")


def _features(dataset: DomainDataset) -> FeatureStore:
    """The store of a dataset prepared with ``train.cache_features``."""
    store = dataset.store
    assert isinstance(store, FeatureStore)
    return store


@pytest.mark.parametrize(
    ("algorithm", "trainable", "augment"),
    [
        ("fedavg", "classifier", "none"),
        ("fedavg", "last_stages", "none"),
        ("fedbn", "last_stages", "none"),
        ("fedavg", "classifier", "dihedral"),
        ("fedprox", "last_stages", "dihedral"),
    ],
)
def test_a_cached_run_repeats_the_partly_frozen_run_on_pixels(
    tmp_path: Path, algorithm: str, trainable: str, augment: str
) -> None:
    """Same start (the trained part is drawn as the pixel path draws it), same
    shuffles, same model: a run on the cached output of the frozen part (the
    embedding, or the maps entering the last stage) ends where the same run on
    pixels ends, frozen part untouched."""
    w = _weights(tmp_path)
    cached = _cfg(
        tmp_path,
        "train.rounds=3",
        "train.lr=0.01",
        f"train.trainable={trainable}",
        f"train.augment={augment}",
        f"algorithm.name={algorithm}",
        "algorithm.params={}",
        weights=w,
    )
    pixels = dataclasses.replace(
        cached,
        name="pixels",
        train=dataclasses.replace(cached.train, cache_features=False),
    )
    a, b = run_experiment(cached)[0], run_experiment(pixels)[0]
    fa = load_model(next((tmp_path / cached.name).rglob("model.fpm")))
    fb = load_model(next((tmp_path / "pixels").rglob("model.fpm")))
    start = build_model(cached.model, 3).state_dict()
    trained = "encoder.stages.1." if trainable == "last_stages" else "classifier."
    moved = set()
    for k, v in fb.model.state_dict().items():
        torch.testing.assert_close(fa.model.state_dict()[k], v, atol=1e-5, rtol=1e-4)
        if k.startswith("encoder.") and not torch.equal(v, start[k]):
            moved.add(k)
    # the frozen part never moved; with last_stages the last stage did
    assert all(k.startswith(trained) for k in moved)
    assert bool(moved) == (trainable == "last_stages")
    assert a["evaluation"]["target"]["accuracy"] == pytest.approx(
        b["evaluation"]["target"]["accuracy"]
    )


def test_the_tail_holds_the_trained_stages_under_their_full_model_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg(tmp_path, "train.trainable=last_stages")
    images = load_dataset(cfg.data)
    maps = prepare_dataset(cfg, images)
    task = make_task(cfg, maps)
    assert isinstance(task, FeatureTask) and task.cut == 1
    full = build_model(cfg.model, images.num_classes).eval()
    x = images.store.load(np.arange(4)).float() / 255
    with torch.no_grad():
        want = full.encoder.stages[0](full.encoder.stem(full.normalize(x)))
        np.testing.assert_allclose(maps.store.load(np.arange(4)), want, atol=1e-5)
        tail = task.build_model()
        tail.load_state_dict(
            {k: v for k, v in full.state_dict().items() if k in tail.state_dict()}
        )
        tail.eval()
        torch.testing.assert_close(tail(want), full(x), atol=1e-5, rtol=1e-4)
    names = set(tail.state_dict())
    assert names == {
        k
        for k in full.state_dict()
        if k.startswith(("encoder.stages.1.", "classifier."))
    }
    # caching maps too big for memory is refused before encoding
    feature_path._ENCODED.clear()
    feature_path._PREPARED.clear()
    monkeypatch.setattr(feature_path, "MAX_CACHE_BYTES", 1000)
    with pytest.raises(ConfigError, match=r"train\.trainable_stages.*GiB"):
        prepare_dataset(
            dataclasses.replace(cfg, output_dir=str(tmp_path / "o")), images
        )


def test_dihedral_views_are_the_frozen_part_of_the_turned_images(
    tmp_path: Path,
) -> None:
    from fedpath.tasks.finetune import dihedral

    cfg = _cfg(tmp_path, "train.augment=dihedral")
    images = load_dataset(cfg.data)
    store = _features(prepare_dataset(cfg, images))
    assert store.views == 8 and store.features.shape[:2] == (len(images.store), 8)
    full = build_model(cfg.model, images.num_classes).eval()
    x = images.store.load(np.arange(3)).float() / 255
    with torch.no_grad():
        for k in (0, 3, 5):
            np.testing.assert_allclose(
                store.features[:3, k], full.encode(dihedral(x, k)), atol=1e-5
            )
    batch = store.load(np.arange(3))
    torch.testing.assert_close(store.model_input(batch), store.features[:3, 0])
    picked = store.pick_views(batch, torch.tensor([7, 0, 2]))
    torch.testing.assert_close(picked[0], store.features[0, 7])
    torch.testing.assert_close(picked[2], store.features[2, 2])


def test_pooled_and_proximal_methods_run_on_features(tmp_path: Path) -> None:
    w = _weights(tmp_path)
    for name in ("fedprox", "central_supervised"):
        cfg = _cfg(tmp_path, f"algorithm.name={name}", "algorithm.params={}", weights=w)
        rec = run_experiment(dataclasses.replace(cfg, name=name))[0]
        assert 0.0 <= rec["evaluation"]["target"]["accuracy"] <= 1.0
    assert len(list((tmp_path / "feature_cache").glob("*.h5"))) == 1


def test_cache_key_follows_the_images_and_the_encoder(tmp_path: Path) -> None:
    a = _cfg(tmp_path, weights=_weights(tmp_path, 3))
    b = _cfg(tmp_path, weights=_weights(tmp_path, 4))
    ds = load_dataset(a.data)
    fa, fb = prepare_dataset(a, ds), prepare_dataset(b, ds)
    assert _features(fa).dim == _features(fb).dim
    assert not torch.equal(_features(fa).features, _features(fb).features)
    assert len(list((tmp_path / "feature_cache").glob("*.h5"))) == 2
    # same config and dataset: the same prepared dataset, not a second encoding
    assert prepare_dataset(a, ds) is fa
    # another cut or augmentation of the same encoder is another cache
    turned = a.replace(**{"train.augment": "dihedral"})
    staged = a.replace(**{"train.trainable": "last_stages"})
    assert prepare_dataset(turned, ds).store.views == 8
    assert _features(prepare_dataset(staged, ds)).features.ndim == 4
    assert _features(prepare_dataset(a, ds)).features.ndim == 2
    # the images' fingerprint follows their pixels...
    imgs = ds.store.load(np.arange(4)).clone()
    before = TensorStore(imgs).fingerprint()
    imgs[0, 0, 0, 0] ^= 1
    assert TensorStore(imgs).fingerprint() != before
    # ...and, for files, their size and modification time
    write_manifest_tree(tmp_path / "tree", per_domain=2, size=16)
    files = sorted((tmp_path / "tree" / "imgs").rglob("*.png"))
    store = FileStore(files, 16)
    first = store.fingerprint()
    os.utime(files[0], ns=(1, 1))
    assert store.fingerprint() != first


def test_bad_input_names_the_option(tmp_path: Path) -> None:
    w = _weights(tmp_path)
    with pytest.raises(ConfigError, match=r"train\.trainable.*'last_stages'"):
        TrainConfig(cache_features=True)
    with pytest.raises(ConfigError, match=r"train\.augment.*'none' or 'dihedral'"):
        TrainConfig(
            cache_features=True, trainable="classifier", augment="dihedral_jitter"
        )
    # a method that transforms pixels cannot train on embeddings
    cfg = _cfg(tmp_path, "algorithm.name=fedstain", "algorithm.params={}", weights=w)
    feats = prepare_dataset(cfg, load_dataset(cfg.data))
    with pytest.raises(TaskMismatch, match=r"train\.cache_features.*fedstain.*fedavg"):
        make_task(cfg, feats)
    # a randomly initialized encoder has no features worth caching
    rand = load_config(
        None,
        tiny_overrides(
            tmp_path, "train.trainable=classifier", "train.cache_features=true"
        ),
    )
    with pytest.raises(ConfigError, match=r"train\.cache_features.*randomly"):
        prepare_dataset(rand, load_dataset(rand.data))
    with pytest.raises(DataError, match="float embeddings"):
        FeatureStore(torch.zeros(3, 4, dtype=torch.uint8), 32)


def test_a_worker_waits_for_another_encoding_the_same_cache_then_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suite's workers (processes) share the cache: while one encodes a file
    (holding its lock) another wanting the same file waits and reads it, rather
    than encoding it a second time."""
    cfg = _cfg(tmp_path)
    images = load_dataset(cfg.data)
    first = prepare_dataset(cfg, images).store
    [path] = (tmp_path / "feature_cache").glob("*.h5")
    aside = path.with_suffix(".aside")
    path.rename(aside)  # as if not yet written by the worker holding the lock
    feature_path._ENCODED.clear()
    feature_path._PREPARED.clear()

    def no_encoding(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("encoded again while another worker was encoding")

    monkeypatch.setattr(feature_path, "encode_all", no_encoding)
    got: list[object] = []
    with feature_path.encoding_lock(path, Reporter()):
        waiter = threading.Thread(
            target=lambda: got.append(prepare_dataset(cfg, images))
        )
        waiter.start()
        waiter.join(timeout=0.5)
        assert waiter.is_alive() and not got  # waiting for the lock
        aside.rename(path)  # the other worker's file is complete
    waiter.join(timeout=30)
    assert not waiter.is_alive() and len(got) == 1
    store = got[0].store  # type: ignore[attr-defined]
    assert isinstance(store, FeatureStore) and isinstance(first, FeatureStore)
    np.testing.assert_array_equal(store.features.numpy(), first.features.numpy())
