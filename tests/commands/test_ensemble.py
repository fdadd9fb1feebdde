"""``fedpath ensemble``: members in, one model file out, used by ``predict`` and
``adapt-bn`` like any model file (the file itself: tests/test_ensemble.py)."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import numpy as np
import pytest

from fedpath.cli import main
from fedpath.ensemble import EnsembleMeta, LoadedEnsemble
from fedpath.loading import load_model
from tests.inference.conftest import member, write_images


def test_the_ensemble_command_writes_a_file_predict_and_adapt_bn_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = [str(member(tmp_path / f"m{i}.fpm", i)) for i in range(3)]
    ens = tmp_path / "ens.fpm"
    assert main(["ensemble", *paths, "--out", str(ens), "--threshold", "0.4"]) == 0
    said = capsys.readouterr().out
    assert f"sha256 {hashlib.sha256(ens.read_bytes()).hexdigest()}" in said
    assert "an ensemble of 3 members" in said and "member 3: m2.fpm" in said
    images = tmp_path / "site"
    write_images(images, {"a": 4})
    out = tmp_path / "pred.csv"
    assert main(["predict", str(ens), str(images), "--out", str(out), "-q"]) == 0
    rows = list(csv.DictReader(out.open()))
    model = load_model(ens)
    assert isinstance(model, LoadedEnsemble) and len(rows) == 4
    mean = np.mean([load_model(p).predict_proba(_files(images)) for p in paths], 0)
    got = np.array([[float(r["prob_normal"]), float(r["prob_tumour"])] for r in rows])
    np.testing.assert_allclose(got, mean, atol=1e-5)
    adapted = tmp_path / "adapted.fpm"
    assert main(["adapt-bn", str(ens), str(images), "--out", str(adapted), "-q"]) == 0
    again = load_model(adapted)
    assert isinstance(again, LoadedEnsemble) and again.meta.adapted_bn["images"] == 4
    assert isinstance(again.meta, EnsembleMeta)
    assert again.meta.threshold == 0.4 and len(again.meta.members) == 3


def _files(folder: Path) -> list[np.ndarray]:
    from PIL import Image

    return [np.asarray(Image.open(p)) for p in sorted(folder.rglob("*.png"))]


def test_bad_ensembles_exit_2_naming_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = str(member(tmp_path / "a.fpm", 0))
    b = str(member(tmp_path / "b.fpm", 1, image_size=32))
    assert main(["ensemble", a, b, "--out", str(tmp_path / "e.fpm")]) == 2
    assert "ensemble member 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["ensemble", a, a, "--out", str(tmp_path / "e.fpm"), "--threshold", "1"])
    assert (
        "argument --threshold: expected a number in (0, 1)" in capsys.readouterr().err
    )
