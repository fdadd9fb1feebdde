"""A site's images for an image model (:mod:`fedpath.inference.images`)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.artifact import LoadedModel
from fedpath.cli import main
from fedpath.config import DataConfig
from fedpath.data.base import DataError
from fedpath.data.files import load_image
from fedpath.inference.images import (
    image_batches,
    image_dataset,
    open_image_files,
    scan_class_folders,
)
from fedpath.loading import load_model
from fedpath.runtime.experiment import run_dir_for, run_experiment
from tests.data.helpers import small_manifest_config
from tests.fixtures import write_manifest_tree
from tests.inference.conftest import SIZE, write_images


def test_class_folders_in_any_case_and_domain_folders(
    image_model: LoadedModel, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    write_images(site, {"NORMAL": 3, "Tumour/deeper": 2})
    ds, names, warnings = open_image_files(site, image_model, False, {})
    assert names == {"NORMAL": "normal", "Tumour": "tumour"} and warnings == []
    assert ds.domains == ["site"] and len(ds.split("site", "all")) == 5
    assert sorted(ds.labels.tolist()) == [0, 0, 0, 1, 1]
    # <domain>/<class>/ folders: one domain per folder
    write_images(tmp_path / "two", {"a/normal": 1, "b/tumour": 2})
    ds, names, _ = open_image_files(tmp_path / "two", image_model, False, {})
    assert ds.domains == ["a", "b"] and names == {}


def test_a_manifest_and_folders_that_match_no_class(
    image_model: LoadedModel, tmp_path: Path
) -> None:
    files = write_images(tmp_path / "imgs", {"x": 2})
    manifest = tmp_path / "labels.csv"
    with manifest.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["path", "label", "domain"])
        w.writerows([[str(files[0]), "N", "h"], [str(files[1]), "T", "h"]])
    ds, names, _ = open_image_files(
        manifest, image_model, False, {"N": "normal", "T": "tumour"}
    )
    assert names == {"N": "normal", "T": "tumour"} and ds.labels.tolist() == [0, 1]
    with pytest.raises(DataError, match="no folder matches a class.*folders seen: x"):
        open_image_files(tmp_path / "imgs", image_model, False, {})
    flat = tmp_path / "flat"
    write_images(flat, {"": 1})
    with pytest.raises(DataError, match="holds images but no class folders"):
        open_image_files(flat, image_model, False, {})
    (tmp_path / "empty" / "normal").mkdir(parents=True)
    with pytest.raises(DataError, match="no images under"):
        scan_class_folders(tmp_path / "empty")


def test_image_batches_resize_skip_and_report_progress(
    image_model: LoadedModel, tmp_path: Path
) -> None:
    files = write_images(tmp_path / "s", {"a": 3})
    (tmp_path / "s" / "a" / "zz.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match="--skip-bad"):
        list(image_batches(image_model, tmp_path / "s", 2, False, [], None))
    skipped: list[str] = []
    seen: list[tuple[int, int]] = []
    batches = list(
        image_batches(
            image_model, tmp_path / "s", 2, True, skipped, lambda *a: seen.append(a)
        )
    )
    assert [names for names, _ in batches] == [
        [str(files[0]), str(files[1])],
        [str(files[2])],
    ]
    assert batches[0][1].shape == (2, 3, SIZE, SIZE)
    assert np.array_equal(batches[0][1][0].numpy(), load_image(files[0], SIZE))
    assert skipped == [str(tmp_path / "s" / "a" / "zz.png")]
    assert seen == [(2, 4), (4, 4)]
    with pytest.raises(DataError, match="does not exist"):
        next(image_batches(image_model, tmp_path / "none", 2, False, [], None))


def test_a_registered_dataset_at_the_models_size_and_not_of_bags(
    image_model: LoadedModel,
) -> None:
    cfg = DataConfig(
        name="synthetic",
        params={"num_hospitals": 2, "samples_per_hospital": 8, "image_size": 32},
    )
    ds, used = image_dataset("synthetic", cfg, image_model)
    assert used.params["image_size"] == SIZE and ds.image_size == SIZE
    bags = DataConfig(name="synthetic_bags", params={"num_hospitals": 2})
    with pytest.raises(DataError, match="holds slide bags.*is an image model"):
        image_dataset("synthetic_bags", bags, image_model)


def test_a_zoomed_run_is_scored_the_same_at_a_new_site(tmp_path: Path) -> None:
    # data.params.zoom travels in model.fpm: evaluate crops the site's whole
    # images as the run's loader did, so it scores the held-out site as the run
    manifest = write_manifest_tree(tmp_path)
    over = [
        f"output_dir={tmp_path / 'runs'}",
        "data.params.zoom=2",
        "train.rounds=1",
        "model.params.widths=[8]",
        "lodo.targets=[site2]",
        "seeds=[0]",
    ]
    cfg = small_manifest_config(tmp_path, *over)
    run_experiment(cfg)
    run_dir = run_dir_for(cfg, "site2", 0)
    model = load_model(run_dir / "model.fpm")
    assert isinstance(model, LoadedModel) and model.meta.zoom == 2.0
    rows = [r for r in csv.DictReader(manifest.open()) if r["domain"] == "site2"]
    site = tmp_path / "site2.csv"
    with site.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows({**r, "path": str(tmp_path / r["path"])} for r in rows)
    out = tmp_path / "m.json"
    assert (
        main(["evaluate", str(run_dir / "model.fpm"), str(site), "--out", str(out)])
        == 0
    )
    target = json.loads((run_dir / "final.json").read_text())["evaluation"]["target"]
    got = json.loads(out.read_text())
    assert got["n"] == target["n"] == len(rows)
    for k in ("balanced_accuracy", "auroc"):
        assert got[k] == pytest.approx(target[k], abs=1e-9), k
    # the Python API crops the same way: a 40 px image -> its central 20 px
    x = torch.rand(2, 3, 40, 40, generator=torch.Generator().manual_seed(0))
    centre = torch.nn.functional.interpolate(
        x[..., 10:30, 10:30], size=(32, 32), mode="bilinear", antialias=True
    )
    torch.testing.assert_close(model.to_tensor(x), centre)
