"""Evaluating a model at an outside hospital (fedpath.inference through
``fedpath evaluate``): folder names, named confusion rates, the test split, the
run's data settings, and tables of per-client runs."""

from __future__ import annotations

import csv
import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fedpath.artifact import LoadedModel
from fedpath.cli import main
from fedpath.config import load_config
from fedpath.errors import ConfigError, DataError
from fedpath.evaluation.metrics import classification_metrics
from fedpath.inference import evaluate, open_data, parse_class_map
from fedpath.loading import load_model
from fedpath.model_file import MAGIC
from fedpath.runtime.experiment import load_dataset, run_dir_for, run_experiment
from tests.conftest import tiny_overrides

KEYS = ("accuracy", "balanced_accuracy", "macro_f1", "auroc", "mcc")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list[str]]:
    """A tiny run holding hospital_2 out, with data settings far from the
    defaults (48 patches per hospital, not 400; 3 hospitals of 32 px)."""
    tmp = tmp_path_factory.mktemp("outside")
    over = tiny_overrides(tmp, "train.rounds=1", "lodo.targets=[hospital_2]")
    cfg = load_config(None, over)
    run_experiment(cfg)
    run_dir = run_dir_for(cfg, "hospital_2", 0)
    final = json.loads((run_dir / "final.json").read_text())["evaluation"]["target"]
    return run_dir / "model.fpm", final, over


def write_site(root: Path, over: list[str], names: dict[str, str]) -> Path:
    """hospital_2's images as root/<names[class]>/<i>.png (lossless PNG)."""
    ds = load_dataset(load_config(None, over).data)
    split = ds.split("hospital_2", "all")
    imgs = split.load(np.arange(len(split))).numpy()
    for i, (img, y) in enumerate(zip(imgs, split.labels, strict=True)):
        p = root / names[ds.classes[y]] / f"{i:03d}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img.transpose(1, 2, 0)).save(p)
    return root


def evaluate_json(argv: list[str], out: Path) -> dict:
    assert main([*argv, "--out", str(out), "-q"]) == 0
    return dict(json.loads(out.read_text()))


# ------------------------------------------------------------ 1. folder names


def test_class_folders_match_in_any_case(
    run: tuple[Path, dict, list[str]], tmp_path: Path
) -> None:
    path, final, over = run
    site = write_site(tmp_path / "site", over, {"normal": "Normal", "tumour": "TUMOUR"})
    got = evaluate_json(["evaluate", str(path), str(site)], tmp_path / "m.json")
    for k in KEYS:
        assert got[k] == pytest.approx(final[k], abs=1e-12), k
    assert got["n"] == 48
    assert got["class_map"] == {"Normal": "normal", "TUMOUR": "tumour"}
    # and inside <domain>/ folders
    nested = tmp_path / "nested"
    write_site(nested / "siteA", over, {"normal": "NORMAL", "tumour": "Tumour"})
    got = evaluate_json(["evaluate", str(path), str(nested)], tmp_path / "n.json")
    assert got["n"] == 48 and got["accuracy"] == pytest.approx(final["accuracy"])


def test_class_map_and_errors_that_name_folders_and_classes(
    run: tuple[Path, dict, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, final, over = run
    site = write_site(
        tmp_path / "site", over, {"normal": "Benign", "tumour": "Mitosis"}
    )
    # nothing matches: the error lists the folders seen and the classes expected
    assert main(["evaluate", str(path), str(site)]) == 2
    err = capsys.readouterr().err
    assert "folders seen: Benign, Mitosis" in err
    assert "normal, tumour" in err and "--class-map" in err
    got = evaluate_json(
        [
            "evaluate",
            str(path),
            str(site),
            "--class-map",
            "Benign=normal,Mitosis=TUMOUR",
        ],
        tmp_path / "m.json",
    )
    for k in KEYS:
        assert got[k] == pytest.approx(final[k], abs=1e-12), k
    assert got["class_map"] == {"Benign": "normal", "Mitosis": "tumour"}
    # one folder matches, the other does not: named, with the folders seen
    (site / "Benign").rename(site / "Normal")
    assert main(["evaluate", str(path), str(site)]) == 2
    err = capsys.readouterr().err
    assert "class folders ['Mitosis'] are not classes of the model" in err
    assert "folders seen: Mitosis, Normal" in err and "--class-map Mitosis=" in err
    assert (
        main(["evaluate", str(path), str(site), "--class-map", "Mitosis=tumour"]) == 0
    )
    capsys.readouterr()
    # bad maps name the option and what was expected
    for bad, needle in (
        ("Mitosis", "is not FOLDER=CLASS"),
        ("Mitosis=mitotic", "'mitotic', which is not a class of the model"),
        ("Mitosis=tumour,Stroma=normal", "['Stroma'] name(s) none of the class"),
        ("Mitosis=tumour,Mitosis=normal", "'Mitosis' is mapped twice"),
    ):
        assert main(["evaluate", str(path), str(site), "--class-map", bad]) == 2
        err = capsys.readouterr().err
        assert "--class-map" in err and needle in err, (bad, err)


def test_class_map_parsing_and_manifest_labels(
    run: tuple[Path, dict, list[str]], tmp_path: Path
) -> None:
    path, final, over = run
    model = load_model(path)
    assert parse_class_map(" A=Normal , b=tumour,", model.class_names) == {
        "A": "normal",
        "b": "tumour",
    }
    with pytest.raises(ConfigError, match="no FOLDER=CLASS entry"):
        parse_class_map(",", model.class_names)
    site = write_site(tmp_path / "site", over, {"normal": "n", "tumour": "t"})
    rows = [
        {"path": str(p), "label": p.parent.name.upper(), "domain": "x"}
        for p in sorted(site.rglob("*.png"))
    ]
    manifest = tmp_path / "labels.csv"
    with manifest.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["path", "label", "domain"])
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(DataError, match=r"labels \['N', 'T'\] are not classes"):
        open_data(str(manifest), model)
    opened = open_data(str(manifest), model, class_map={"N": "normal", "t": "tumour"})
    got = evaluate(model, opened.dataset, bootstrap=0)
    assert got["accuracy"] == pytest.approx(final["accuracy"], abs=1e-12)
    assert "bootstrap" not in got
    # a registered dataset's classes map too (swapped: every call flips), and the
    # dataset, which may be cached and shared, is left as it was
    swap = {"normal": "tumour", "tumour": "normal"}
    opened = open_data("synthetic:hospital_2", model, class_map=swap)
    assert opened.renamed == swap
    flipped = evaluate(model, opened.dataset, opened.domains, bootstrap=0)
    assert flipped["accuracy"] == pytest.approx(1 - final["accuracy"], abs=1e-12)
    assert load_dataset(load_config(None, over).data).classes == ["normal", "tumour"]


def test_predict_reads_differently_named_class_folders(
    run: tuple[Path, dict, list[str]], tmp_path: Path
) -> None:
    path, _, over = run
    site = write_site(
        tmp_path / "site", over, {"normal": "Normal", "tumour": "Mitosis"}
    )
    out = tmp_path / "p.csv"
    assert main(["predict", str(path), str(site), "--out", str(out), "-q"]) == 0
    assert len(list(csv.DictReader(out.open()))) == 48


# ------------------------------------------- 2. per-class rates, bootstrap CIs


def test_evaluate_reports_named_confusion_rates_and_intervals(
    run: tuple[Path, dict, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, final, over = run
    site = write_site(tmp_path / "site", over, {"normal": "normal", "tumour": "tumour"})
    argv = ["evaluate", str(path), str(site), "--per-domain"]
    assert main([*argv, "--bootstrap", "200", "--seed", "1"]) == 0
    text = capsys.readouterr().out
    assert "true \\ predicted" in text and "rows = true class" in text
    assert "sensitivity" in text and "specificity" in text
    assert "95% bootstrap CI (200 resamples of the images, seed 1)" in text
    a = evaluate_json([*argv, "--bootstrap", "200", "--seed", "1"], tmp_path / "a.json")
    b = evaluate_json([*argv, "--bootstrap", "200", "--seed", "1"], tmp_path / "b.json")
    c = evaluate_json([*argv, "--bootstrap", "200", "--seed", "2"], tmp_path / "c.json")
    assert a["bootstrap"] == b["bootstrap"] and a["bootstrap"] != c["bootstrap"]
    assert a["bootstrap"]["resamples"] == 200 and a["bootstrap"]["seed"] == 1
    for k in ("balanced_accuracy", "auroc"):
        lo, hi = a["bootstrap"][k]
        assert lo <= a[k] <= hi, k
    assert a["per_domain"]["site"]["bootstrap"] == a["bootstrap"]
    assert a["classes"] == ["normal", "tumour"]
    cm = np.array(a["confusion"])
    assert cm.sum() == 48 and np.trace(cm) / 48 == pytest.approx(final["accuracy"])
    tn, fp, fn, tp = cm.ravel()  # the positive class tumour
    assert a["per_class"]["tumour"] == {
        "n": int(fn + tp),
        "sensitivity": pytest.approx(tp / (tp + fn)),
        "specificity": pytest.approx(tn / (tn + fp)),
    }
    assert a["per_class"]["normal"]["sensitivity"] == pytest.approx(tn / (tn + fp))
    off = evaluate_json([*argv, "--bootstrap", "0"], tmp_path / "off.json")
    assert "bootstrap" not in off and off["accuracy"] == a["accuracy"]
    with pytest.raises(SystemExit) as ex:
        main([*argv, "--bootstrap", "-1"])
    assert ex.value.code == 2
    assert "argument --bootstrap: expected an integer >= 0" in capsys.readouterr().err


# ------------------------------------------------------------ 3. --split test


def test_split_test_scores_only_the_test_split(
    run: tuple[Path, dict, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, _, over = run
    model = load_model(path)
    assert isinstance(model, LoadedModel)  # an image model, not a MIL one
    test = load_dataset(load_config(None, over).data).split("hospital_2", "test")
    assert 0 < len(test) < 48
    got = evaluate_json(
        ["evaluate", str(path), "synthetic:hospital_2", "--split", "test"],
        tmp_path / "m.json",
    )
    probs = model.predict_proba(test.load(np.arange(len(test))))
    ref = classification_metrics(test.labels, probs)
    assert got["n"] == len(test) and got["split"] == "test"
    for k in KEYS:
        assert got[k] == pytest.approx(ref[k], abs=1e-6), k
    # every part of every domain when no domain is named
    every = evaluate_json(
        ["evaluate", str(path), "synthetic", "--split", "test", "--bootstrap", "0"],
        tmp_path / "e.json",
    )
    ds = load_dataset(load_config(None, over).data)
    assert every["n"] == int(ds.is_test.sum())
    site = write_site(tmp_path / "site", over, {"normal": "normal", "tumour": "tumour"})
    assert main(["evaluate", str(path), str(site), "--split", "test"]) == 2
    assert "--split test" in capsys.readouterr().err


# ---------------------------------------------- 5. the run's own data settings


def test_registered_dataset_uses_the_runs_data_settings(
    run: tuple[Path, dict, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, final, _ = run
    model = load_model(path)
    assert model.meta.data["params"]["samples_per_hospital"] == 48  # not 400
    out = tmp_path / "m.json"
    assert main(["evaluate", str(path), "synthetic:hospital_2", "--out", str(out)]) == 0
    assert "settings from the model's run" in capsys.readouterr().out
    got = json.loads(out.read_text())
    for k in KEYS:
        assert got[k] == pytest.approx(final[k], abs=1e-12), k
    assert got["n"] == final["n"] == 48
    assert got["data_settings"]["params"]["samples_per_hospital"] == 48
    # a training hospital's test split: the run's source evaluation of it
    record = json.loads((path.parent / "final.json").read_text())["evaluation"]
    src = evaluate_json(
        ["evaluate", str(path), "synthetic:hospital_0", "--split", "test"],
        tmp_path / "src.json",
    )
    for k in KEYS:
        assert src[k] == pytest.approx(record["source"]["hospital_0"][k], abs=1e-12)
    # data.* overrides change the run's settings, the rest stays the run's
    small = evaluate_json(
        [
            "evaluate",
            str(path),
            "synthetic:hospital_2",
            "data.params.samples_per_hospital=24",
        ],
        tmp_path / "s.json",
    )
    assert small["n"] == 24
    assert small["data_settings"]["params"]["num_hospitals"] == 3
    assert "data.params.samples_per_hospital" in small["data_settings"]["source"]


def test_a_model_file_without_data_settings_says_so(
    run: tuple[Path, dict, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    blob = run[0].read_bytes()
    n = struct.unpack("<Q", blob[len(MAGIC) : len(MAGIC) + 8])[0]
    head = json.loads(blob[len(MAGIC) + 8 : len(MAGIC) + 8 + n])
    head.pop("data")
    new = json.dumps(head).encode()
    body = MAGIC + struct.pack("<Q", len(new)) + new + blob[len(MAGIC) + 8 + n : -32]
    old = tmp_path / "old.fpm"
    old.write_bytes(body + hashlib.sha256(body).digest())
    assert load_model(old).meta.data == {}
    argv = ["evaluate", str(old), "synthetic:hospital_2", "--bootstrap", "0"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "records no data settings" in text and "samples_per_hospital=400" in text


# ------------------------------------------------ 4. tables of per-client runs


def test_table_of_runs_without_a_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    over = tiny_overrides(
        tmp_path, "train.rounds=1", "lodo.targets=none", "evaluation.protocol=local"
    )
    cfg = load_config(None, over)
    run_experiment(cfg)
    root = run_dir_for(cfg, "none", 0).parent.parent
    capsys.readouterr()
    for metric in ("accuracy", "balanced_accuracy"):
        assert main(["table", str(root), "--metric", metric]) == 0
        text = capsys.readouterr().out
        assert "clients' own test splits" in text and "hospital_0/c0" in text
    assert main(["table", str(root), "--format", "csv"]) == 0
    assert "fedavg,hospital_1/c1," in capsys.readouterr().out
    for split in ("target", "source_mean"):
        assert main(["table", str(root), "--split", split]) == 2
        err = capsys.readouterr().err
        assert f"--split {split}: none of the 1 finished runs" in err
        assert "use --split clients" in err and "expected one of" not in err
    assert main(["table", str(root), "--metric", "nope"]) == 2
    err = capsys.readouterr().err
    assert "expected one of accuracy, auroc, balanced_accuracy" in err
