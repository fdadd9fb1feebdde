"""Export, evaluate and predict at a hospital that never took part (issue 6), and
the selected round's decision rule in the model file. Every header field checked
at load: ``test_artifact_header.py``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fedpath.artifact import (
    ArtifactError,
    LoadedModel,
    read_model_file,
    save_model,
)
from fedpath.cli import main
from fedpath.config import load_config
from fedpath.evaluation.calibration import apply_temperature
from fedpath.loading import load_model
from fedpath.runtime.experiment import load_dataset, run_dir_for, run_experiment
from tests.conftest import tiny_overrides
from tests.fixtures import rewrite_header


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list[str]]:
    tmp = tmp_path_factory.mktemp("trained")
    over = tiny_overrides(tmp, "train.rounds=1", "lodo.targets=[hospital_2]")
    cfg = load_config(None, over)
    run_experiment(cfg)
    run_dir = run_dir_for(cfg, "hospital_2", 0)
    final = json.loads((run_dir / "final.json").read_text())["evaluation"]["target"]
    return run_dir / "model.fpm", final, over


def write_class_folders(root: Path, over: list[str]) -> Path:
    """The held-out hospital's images as root/<class>/<i>.png (lossless)."""
    ds = load_dataset(load_config(None, over).data)
    split = ds.split("hospital_2", "all")
    imgs = split.load(np.arange(len(split))).numpy()
    for i, (img, y) in enumerate(zip(imgs, split.labels, strict=True)):
        p = root / ds.classes[y] / f"{i:03d}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img.transpose(1, 2, 0)).save(p)
    return root


def test_artifact_is_self_describing(trained: tuple[Path, dict, list[str]]) -> None:
    path, _, _ = trained
    meta, weights = read_model_file(path)
    assert meta.backbone == "small_cnn" and meta.backbone_params["widths"] == [8, 16]
    assert meta.class_names == ["normal", "tumour"] and meta.image_size == 32
    assert meta.held_out == "hospital_2"
    assert meta.trained_on == ["hospital_0", "hospital_1"]
    assert len(meta.config_hash) == 16 and meta.fedpath_version
    assert meta.mean == pytest.approx([0.485, 0.456, 0.406])
    assert "encoder.stages.0.0.weight" in weights


def test_evaluate_registered_domain_equals_the_run(
    trained: tuple[Path, dict, list[str]], tmp_path: Path
) -> None:
    path, final, over = trained
    data_over = [o for o in over if o.startswith("data.")]
    out = tmp_path / "m.json"
    assert (
        main(
            [
                "evaluate",
                str(path),
                "synthetic:hospital_2",
                *data_over,
                "--out",
                str(out),
                "-q",
            ]
        )
        == 0
    )
    got = json.loads(out.read_text())
    for k in ("accuracy", "balanced_accuracy", "macro_f1", "auroc", "mcc"):
        assert got[k] == pytest.approx(final[k], abs=1e-12), k
    assert got["n"] == final["n"] == 48
    assert np.array(got["confusion"]).sum() == 48


def test_evaluate_folder_layout_equals_the_run(
    trained: tuple[Path, dict, list[str]], tmp_path: Path
) -> None:
    path, final, over = trained
    root = write_class_folders(tmp_path / "site", over)
    out = tmp_path / "m.json"
    assert (
        main(["evaluate", str(path), str(root), "--per-domain", "--out", str(out)]) == 0
    )
    got = json.loads(out.read_text())
    for k in ("accuracy", "balanced_accuracy", "macro_f1", "auroc", "mcc"):
        assert got[k] == pytest.approx(final[k], abs=1e-12), k
    assert set(got["per_domain"]) == {"site"}


def test_predict_folder_writes_one_row_per_image(
    trained: tuple[Path, dict, list[str]], tmp_path: Path
) -> None:
    path, _, over = trained
    root = write_class_folders(tmp_path / "imgs", over)
    # one image of another size: resized like training
    Image.open(next(root.rglob("*.png"))).resize((50, 50)).save(root / "big.png")
    out = tmp_path / "pred.csv"
    assert main(["predict", str(path), str(root), "--out", str(out), "-q"]) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 49
    assert list(rows[0]) == ["path", "predicted", "prob_normal", "prob_tumour"]
    model = load_model(path)
    first = Image.open(rows[0]["path"])
    probs = model.predict_proba([first])[0]
    assert float(rows[0]["prob_tumour"]) == pytest.approx(probs[1], abs=1e-6)
    for r in rows:
        p = [float(r["prob_normal"]), float(r["prob_tumour"])]
        assert sum(p) == pytest.approx(1, abs=1e-5)
        assert r["predicted"] == ["normal", "tumour"][int(np.argmax(p))]


def test_python_api_pil_and_tensor_agree(trained: tuple[Path, dict, list[str]]) -> None:
    import torch

    model = load_model(trained[0])
    assert isinstance(model, LoadedModel)
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 255, (3, 32, 32, 3), dtype=np.uint8)
    pil = [Image.fromarray(a) for a in arr]
    p1 = model.predict_proba(pil)
    p2 = model.predict_proba(torch.from_numpy(arr.transpose(0, 3, 1, 2).copy()))
    np.testing.assert_allclose(p1, p2, atol=1e-6)
    assert model.predict(pil) == [model.class_names[i] for i in p1.argmax(1)]


def test_a_damaged_file_is_refused_naming_it(
    trained: tuple[Path, dict, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """By :func:`load_model` and by the CLI (the container's checks in all their
    cases: tests/test_model_file.py)."""
    blob = trained[0].read_bytes()
    cut = tmp_path / "cut.fpm"
    cut.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ArtifactError, match=r"cut.fpm' is truncated"):
        load_model(cut)
    assert main(["evaluate", str(cut), "synthetic:hospital_0"]) == 2
    assert "is truncated" in capsys.readouterr().err


def test_bad_data_inputs(
    trained: tuple[Path, dict, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, _, over = trained
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "p.csv"
    assert main(["predict", str(path), str(empty), "--out", str(out)]) == 2
    assert "no images" in capsys.readouterr().err and not out.exists()
    root = write_class_folders(tmp_path / "imgs", over)
    broken = sorted((root / "normal").glob("*.png"))[0]
    broken.write_bytes(b"garbage")
    assert main(["predict", str(path), str(root), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert broken.name in err and "--skip-bad" in err and not out.exists()
    assert (
        main(["predict", str(path), str(root), "--out", str(out), "--skip-bad", "-q"])
        == 0
    )
    assert len(list(csv.DictReader(out.open()))) == 47
    assert "skipped 1 unreadable" in capsys.readouterr().err
    assert main(["evaluate", str(path), str(root)]) == 2
    assert broken.name in capsys.readouterr().err
    assert main(["evaluate", str(path), str(root), "--skip-bad", "-q"]) == 0
    assert "skipped 1 unreadable images" in capsys.readouterr().out
    (root / "mitosis").mkdir()
    Image.new("RGB", (32, 32)).save(root / "mitosis" / "a.png")
    assert main(["evaluate", str(path), str(root), "--skip-bad"]) == 2
    assert "class folders ['mitosis'] are not classes of the model" in (
        capsys.readouterr().err
    )


# ------------------------------------------- the selected round's decision rule


SELECTED = [
    "lodo.targets=[hospital_2]",
    "train.rounds=5",
    "train.batch_size=8",
    "partition.validation=0.3",
    "evaluation.target_sensitivity=0.9",
    "runtime.export=selected",
]


@pytest.fixture(scope="module")
def selected(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list[str]]:
    """A model exported from the round selected on the sources' validation slides,
    with its temperature and operating point."""
    tmp = tmp_path_factory.mktemp("selected")
    over = tiny_overrides(tmp, *SELECTED)
    cfg = load_config(None, over)
    run_experiment(cfg)
    run_dir = run_dir_for(cfg, "hospital_2", 0)
    final = json.loads((run_dir / "final.json").read_text())["evaluation"]
    return run_dir / "model.fpm", final["selected"], over


def test_model_file_round_trips_temperature_and_threshold(
    selected: tuple[Path, dict, list[str]], tmp_path: Path
) -> None:
    path, sel, _ = selected
    meta, weights = read_model_file(path)
    assert (meta.round, meta.selection) == (sel["round"], "selected")
    assert meta.temperature == sel["calibrated"]["temperature"]
    assert meta.threshold == sel["operating_point"]["threshold"]
    assert meta.target_sensitivity == 0.9
    model = load_model(path)
    again = save_model(tmp_path / "again.fpm", model.model, meta)
    meta2, weights2 = read_model_file(again)
    assert meta2 == meta and all(
        np.array_equal(weights[k], weights2[k]) for k in weights
    )

    # a file written before these fields existed loads, with no decision rule
    def drop(head: dict) -> None:
        for key in ("round", "selection", "temperature", "threshold"):
            head.pop(key)
        head.pop("target_sensitivity")
        head.pop("validation")  # and before the consortium's figures (issue 41)
        head.pop("expected")

    old = load_model(rewrite_header(path, tmp_path / "old.fpm", drop))
    assert isinstance(model, LoadedModel) and isinstance(old, LoadedModel)
    assert old.meta.temperature is None and old.meta.threshold is None
    old_meta = read_model_file(tmp_path / "old.fpm")[0]
    assert old_meta.validation == {} and old_meta.expected == {}
    assert meta.validation["n"] == sel["calibrated"]["validation"]["n"]
    x = torch.zeros(2, 3, 32, 32, dtype=torch.uint8)
    raw = old.predict_proba(x)
    assert meta.temperature is not None
    np.testing.assert_allclose(
        model.predict_proba(x), apply_temperature(raw, meta.temperature), atol=1e-12
    )

    def three(head: dict) -> None:
        head["class_names"] = ["a", "b", "c"]

    def cold(head: dict) -> None:
        head["temperature"] = 0.0

    with pytest.raises(ArtifactError, match="three.fpm': a threshold needs two"):
        load_model(rewrite_header(path, tmp_path / "three.fpm", three))
    with pytest.raises(
        ArtifactError,
        match="cold.fpm': header field 'temperature': expected a number > 0",
    ):
        load_model(rewrite_header(path, tmp_path / "cold.fpm", cold))


def test_evaluate_and_predict_apply_temperature_and_threshold(
    selected: tuple[Path, dict, list[str]], tmp_path: Path
) -> None:
    path, sel, over = selected
    data_over = [o for o in over if o.startswith("data.")]
    out = tmp_path / "m.json"
    argv = [
        "evaluate",
        str(path),
        "synthetic:hospital_2",
        *data_over,
        "--out",
        str(out),
    ]
    assert main([*argv, "-q"]) == 0
    got = json.loads(out.read_text())
    # the exported weights are the selected round's; probabilities calibrated
    calibrated = sel["calibrated"]["target"]
    for k in ("accuracy", "balanced_accuracy", "auroc", "ece"):
        assert got[k] == pytest.approx(calibrated[k], abs=1e-9), k
    assert got["accuracy"] == pytest.approx(sel["target"]["accuracy"], abs=1e-12)
    assert got["temperature"] == sel["calibrated"]["temperature"]
    op, ref = got["operating_point"], sel["operating_point"]["target"]
    for k in ("threshold", "sensitivity", "specificity", "accuracy", "mcc"):
        assert op[k] == pytest.approx(ref[k], abs=1e-9), k
    assert np.array(op["confusion"]).sum() == 48

    root = write_class_folders(tmp_path / "imgs", over)
    csv_out = tmp_path / "pred.csv"
    assert main(["predict", str(path), str(root), "--out", str(csv_out), "-q"]) == 0
    threshold = sel["operating_point"]["threshold"]
    for r in csv.DictReader(csv_out.open()):
        p = float(r["prob_tumour"])
        if abs(p - threshold) > 1e-5:  # the CSV rounds to 6 decimals
            assert r["predicted"] == ("tumour" if p >= threshold else "normal")

    # with an operating point of 0 every image is called tumour, whatever the argmax
    def zero(head: dict) -> None:
        head["threshold"] = 0.0

    everything = rewrite_header(path, tmp_path / "zero.fpm", zero)
    assert (
        main(["predict", str(everything), str(root), "--out", str(csv_out), "-q"]) == 0
    )
    rows = list(csv.DictReader(csv_out.open()))
    assert {r["predicted"] for r in rows} == {"tumour"}
    assert any(float(r["prob_normal"]) > 0.5 for r in rows)
