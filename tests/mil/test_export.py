"""FedHD client models at a new hospital: export, load, evaluate and predict."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch

from fedpath.artifact import (
    ArtifactError,
    LoadedModel,
    ModelMeta,
    read_model_file,
    save_model,
)
from fedpath.cli import main
from fedpath.config import DataConfig, ExperimentConfig, ModelConfig, load_config
from fedpath.data.base import DataError
from fedpath.inference import open_data
from fedpath.loading import load_mil_model, load_model
from fedpath.mil.bags import SlideBag
from fedpath.mil.export import (
    LoadedMILModel,
    client_file,
    dataset_encoder,
    encoder_mismatch,
)
from fedpath.mil.predict import evaluate_mil
from fedpath.model_file import read_container
from fedpath.models.backbones import build_model
from fedpath.runtime.experiment import load_dataset, run_dir_for, run_experiment
from tests.mil_helpers import FEDHD, TINY, same_metrics

CLIENTS = ["hospital_0/c0", "hospital_1/c0", "hospital_2/c0"]


class Run:
    """A finished tiny FedHD run: its config, directory and final record."""

    def __init__(self, cfg: ExperimentConfig, run_dir: Path) -> None:
        self.cfg = cfg
        self.dir = run_dir
        self.final = json.loads((run_dir / "final.json").read_text())

    def model_file(self, cid: str) -> Path:
        return client_file(self.dir / "models", cid)

    def metrics(self, cid: str) -> dict[str, Any]:
        return dict(self.final["evaluation"]["clients"][cid])

    def test_bags(self, domain: str) -> tuple[list[SlideBag], list[str]]:
        """The domain's test slides (one client per domain: the client's own)."""
        ds = load_dataset(self.cfg.data)
        split = ds.split(domain, "test")
        return ds.store.bags(split.indices), list(ds.classes)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp = tmp_path_factory.mktemp("fedhd_export")
    cfg = load_config(
        None,
        [
            f"output_dir={tmp}",
            *TINY,
            *FEDHD,
            "seeds=[0]",
            "train.local_epochs=2",
            "data.params.max_patches=40",
            # a heterogeneous federation: hospital_2 deploys a TransMIL
            "algorithm.params.models={hospital_2: transmil}",
            "algorithm.params.model_params={transmil: {hidden: 16, landmarks: 4}}",
        ],
    )
    run_experiment(cfg)
    return Run(cfg, run_dir_for(cfg, "none", 0))


def write_bags(
    root: Path, bags: list[SlideBag], classes: list[str], layout: str
) -> Path:
    """The slides as bag files: ``csv`` (CLAM: h5_files/ for even slides, pt_files/
    for odd ones, and slides.csv) or ``folders`` (<class>/<slide>.pt|.h5)."""
    for i, b in enumerate(bags):
        kind = "h5" if i % 2 == 0 else "pt"
        folder = root / (f"{kind}_files" if layout == "csv" else classes[b.label])
        folder.mkdir(parents=True, exist_ok=True)
        if kind == "h5":
            with h5py.File(folder / f"{b.slide_id}.h5", "w") as fh:
                fh.create_dataset("features", data=b.features.numpy())
        else:
            torch.save(b.features, folder / f"{b.slide_id}.pt")
    if layout == "csv":
        with (root / "slides.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["slide_id", "label"])
            w.writerows([b.slide_id, classes[b.label]] for b in bags)
    return root


def evaluate_cli(model: Path, data: str, out: Path, *extra: str) -> dict[str, Any]:
    code = main(["evaluate", str(model), data, "--out", str(out), "--quiet", *extra])
    assert code == 0
    return dict(json.loads(out.read_text()))


def test_every_client_file_loads_and_describes_itself(run: Run) -> None:
    assert sorted(p.name for p in (run.dir / "models").iterdir()) == [
        "hospital_0__c0.fpm",
        "hospital_1__c0.fpm",
        "hospital_2__c0.fpm",
    ]
    for cid in CLIENTS:
        model = load_mil_model(run.model_file(cid))
        m = model.meta
        assert (m.kind, m.client, m.domain) == ("mil", cid, cid.split("/")[0])
        assert m.method == "fedhd" and m.seed == 0 and m.round == 1
        assert m.config_hash == run.final["config_hash"] == run.cfg.hash()
        assert m.fedpath_version == run.final["fedpath"]
        assert m.in_dim == 8 and m.embedding_space == "synthetic"
        assert m.class_names == ["normal", "tumour"]
        assert m.data["name"] == "synthetic_bags" and m.data["params"]["dim"] == 8
        assert m.federation == ["hospital_0", "hospital_1", "hospital_2"]
        assert isinstance(load_model(run.model_file(cid)), LoadedMILModel)
    abmil = load_mil_model(run.model_file("hospital_0/c0")).meta
    transmil = load_mil_model(run.model_file("hospital_2/c0")).meta
    assert abmil.architecture == "abmil" and abmil.architecture_params["hidden"] == 16
    assert transmil.architecture == "transmil"
    # every parameter is recorded, defaults included
    assert transmil.architecture_params["landmarks"] == 4
    assert transmil.architecture_params["heads"] == 4
    # the image-only reader names the loader of every kind
    with pytest.raises(ArtifactError, match="holds a mil model.*fedpath.load_model"):
        read_model_file(run.model_file("hospital_0/c0"))


def test_registered_dataset_reproduces_each_clients_run_metrics(
    run: Run, tmp_path: Path
) -> None:
    for cid in CLIENTS:
        domain = cid.split("/")[0]
        out = evaluate_cli(
            run.model_file(cid),
            f"synthetic_bags:{domain}",
            tmp_path / f"{domain}.json",
            "--split",
            "test",
        )
        assert out["data_settings"]["source"] == "the model's run"
        same_metrics(run.metrics(cid), out)
        assert "bootstrap" in out and "per_class" in out


@pytest.mark.parametrize("layout", ["csv", "folders"])
def test_bag_files_reproduce_each_clients_run_metrics(
    run: Run, tmp_path: Path, layout: str
) -> None:
    for cid in CLIENTS:
        domain = cid.split("/")[0]
        bags, classes = run.test_bags(domain)
        root = write_bags(tmp_path / domain, bags, classes, layout)
        out = evaluate_cli(
            run.model_file(cid),
            str(root),
            tmp_path / f"{domain}.json",
            "--bootstrap",
            "0",
        )
        assert out["n"] == run.metrics(cid)["n"] == len(bags)
        same_metrics(run.metrics(cid), out)


def test_predict_writes_the_run_s_probabilities(run: Run, tmp_path: Path) -> None:
    cid = "hospital_2/c0"
    bags, classes = run.test_bags("hospital_2")
    root = write_bags(tmp_path / "site", bags, classes, "csv")
    out = tmp_path / "preds.csv"
    assert (
        main(["predict", str(run.model_file(cid)), str(root), "--out", str(out)]) == 0
    )
    rows = {r["slide"]: r for r in csv.DictReader(out.open())}
    assert sorted(rows) == sorted(b.slide_id for b in bags)
    model = load_mil_model(run.model_file(cid))
    # the Python entry point takes plain (N, D) tensors or arrays too
    direct = model.predict_proba([b.features.numpy() for b in bags])
    assert np.array_equal(direct, model.predict_proba(bags))
    for b, p in zip(bags, direct, strict=True):
        row = rows[b.slide_id]
        written = [float(row[f"prob_{c}"]) for c in classes]
        assert written == p.tolist()  # full precision: the same floats
        assert row["predicted"] == classes[int(np.argmax(p))]
        assert row["path"].endswith((".h5", ".pt"))
    assert model.predict(bags) == [classes[int(i)] for i in direct.argmax(1)]


def test_python_entry_point_matches_the_run_s_own_evaluation(run: Run) -> None:
    """The loaded model computes what the run's deployed model computed."""
    from fedpath.evaluation.metrics import classification_metrics

    for cid in CLIENTS:
        bags, _ = run.test_bags(cid.split("/")[0])
        model = load_mil_model(run.model_file(cid))
        probs, labels = evaluate_mil(model.model, bags)
        assert np.array_equal(model.predict_proba(bags), probs)
        mine = dict(classification_metrics(labels, probs))
        mine["n"] = len(bags)
        same_metrics(run.metrics(cid), mine)


def test_a_bag_of_another_dimension_is_named(
    run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = run.model_file("hospital_0/c0")
    model = load_mil_model(path)
    site = tmp_path / "site"
    (site / "tumour").mkdir(parents=True)
    bad = site / "tumour" / "wrong.pt"
    torch.save(torch.randn(12, 5), bad)
    with pytest.raises(DataError, match=r"wrong\.pt.*dimension 5.*expects 8"):
        open_data(str(site), model)
    with pytest.raises(
        DataError, match="bag 0: bag has feature dimension 5.*expects 8"
    ):
        model.predict_proba([torch.randn(12, 5)])
    code = main(["predict", str(path), str(bad), "--out", str(tmp_path / "p.csv")])
    err = capsys.readouterr().err.replace("\n", "")
    assert code == 2
    assert "wrong.pt" in err and "expects 8" in err
    assert not (tmp_path / "p.csv").exists()


def test_a_corrupted_or_truncated_file_is_refused(run: Run, tmp_path: Path) -> None:
    blob = bytearray(run.model_file("hospital_1/c0").read_bytes())
    flipped = tmp_path / "flipped.fpm"
    blob[len(blob) // 2] ^= 0x01  # one bit of the weights
    flipped.write_bytes(bytes(blob))
    with pytest.raises(ArtifactError, match="flipped.fpm.*SHA-256 does not match"):
        load_mil_model(flipped)
    header = tmp_path / "header.fpm"
    text = run.model_file("hospital_1/c0").read_bytes()
    header.write_bytes(text.replace(b'"tumour"', b'"normax"', 1))  # same length
    with pytest.raises(ArtifactError, match="SHA-256 does not match"):
        load_mil_model(header)
    cut = tmp_path / "cut.fpm"
    cut.write_bytes(text[:-100])
    with pytest.raises(ArtifactError, match="cut.fpm"):
        load_model(cut)


def test_image_model_files_still_load_as_before(tmp_path: Path) -> None:
    cfg = ModelConfig(backbone="small_cnn", params={"widths": [8, 16]})
    net = build_model(cfg, 2)
    meta = ModelMeta(
        "small_cnn", {"widths": [8, 16]}, ["a", "b"], 16, [0.5] * 3, [0.2] * 3
    )
    path = save_model(tmp_path / "model.fpm", net, meta)
    header, _ = read_container(path)
    assert "kind" not in header  # an image file is written exactly as before
    loaded = load_model(path)
    assert isinstance(loaded, LoadedModel) and loaded.class_names == ["a", "b"]
    with pytest.raises(ArtifactError, match="not a MIL model.*load_model"):
        load_mil_model(path)


def test_the_encoder_recorded_by_bag_files_travels_with_the_model(
    tmp_path: Path,
) -> None:
    h5 = tmp_path / "h5_files" / "s1.h5"
    h5.parent.mkdir()
    with h5py.File(h5, "w") as fh:
        fh.create_dataset("features", data=np.zeros((3, 4), np.float32))
        cds = fh.create_dataset("coords", data=np.zeros((3, 2), np.int64))
        cds.attrs["patch_size"] = 256
        cds.attrs["magnification"] = 20.0
        fh.attrs["backbone"] = "resnet50_trunc"
        fh.attrs["weights_sha256"] = "ab" * 32
        fh.attrs["input_size"] = 224
    enc = dataset_encoder(DataConfig(name="clam_bags", root=str(tmp_path)))
    assert enc == {
        "backbone": "resnet50_trunc",
        "weights_sha256": "ab" * 32,
        "input_size": 224,
        "patch_size": 256,
        "magnification": 20.0,
        "read_from": "h5_files/s1.h5",
    }
    assert dataset_encoder(DataConfig(name="synthetic_bags")) == {}
    other = {**enc, "weights_sha256": "cd" * 32}
    assert encoder_mismatch(enc, other) == [
        f"weights_sha256: model {'ab' * 32!r}, bags {'cd' * 32!r}"
    ]
    assert encoder_mismatch(enc, {"backbone": "resnet50_trunc"}) == []
