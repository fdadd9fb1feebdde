"""Image and manifest readers on the files real users have: 16-bit and RGBA PNGs,
tiny images, Excel's BOM, empty classes, a corrupt image met lazily, a domain of one
slide. Each case used to pass silently or crash mid-run."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fedpath.config import load_config
from fedpath.data.base import DataError
from fedpath.data.files import load_image
from fedpath.runtime.experiment import load_dataset, run_experiment
from tests.fixtures import write_manifest_tree


def test_16_bit_grayscale_is_scaled_by_its_depth(tmp_path: Path) -> None:
    a = np.full((20, 20), 32768, np.uint16)  # half of the 16-bit range
    Image.fromarray(a).save(tmp_path / "g16.png")
    assert Image.open(tmp_path / "g16.png").mode.startswith("I")
    out = load_image(tmp_path / "g16.png", 20)
    assert out.shape == (3, 20, 20) and int(out.max()) == int(out.min()) == 128


def test_transparency_is_composited_on_white(tmp_path: Path) -> None:
    rgba = np.zeros((16, 16, 4), np.uint8)
    rgba[..., 0] = 200  # red, but half of it fully transparent
    rgba[:8, :, 3] = 255
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    out = load_image(tmp_path / "a.png", 16)
    assert (out[:, :8] == np.array([200, 0, 0])[:, None, None]).all()
    assert (out[:, 8:] == 255).all()  # transparent -> white, not black


def test_a_tiny_image_is_refused(tmp_path: Path) -> None:
    Image.new("RGB", (1, 1)).save(tmp_path / "dot.png")
    with pytest.raises(DataError, match=r"dot.png' is 1x1 px, too small .* 8 px"):
        load_image(tmp_path / "dot.png", 32)
    Image.new("RGB", (12, 12)).save(tmp_path / "small.png")
    with pytest.raises(DataError, match="at least 32 px a side"):
        load_image(tmp_path / "small.png", 128)
    assert load_image(tmp_path / "small.png", 40).shape == (3, 40, 40)  # 12 >= 10


def _cfg(root: Path, *extra: str):  # type: ignore[no-untyped-def]
    return load_config(
        None,
        [
            "data.name=manifest",
            f"data.root={root}",
            "data.params.image_size=32",
            *extra,
        ],
    )


def test_a_manifest_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    path = write_manifest_tree(tmp_path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())  # as Excel saves CSV
    assert len(load_dataset(_cfg(tmp_path).data).domains) == 3


def test_a_listed_class_without_images_is_refused(tmp_path: Path) -> None:
    write_manifest_tree(tmp_path)
    cfg = _cfg(tmp_path, "data.params.classes=[normal, tumour, necrosis]")
    with pytest.raises(DataError, match=r"class\(es\) \['necrosis'\] .* have no image"):
        load_dataset(cfg.data)


def _corrupt_one(tmp_path: Path) -> str:
    path = write_manifest_tree(tmp_path)
    rows = list(csv.DictReader(path.open()))
    bad = tmp_path / rows[5]["path"]
    bad.write_bytes(bad.read_bytes()[:40])  # a truncated PNG
    return f"manifest.csv:{5 + 2}"


def test_lazy_loading_with_skip_bad_checks_every_image_first(tmp_path: Path) -> None:
    where = _corrupt_one(tmp_path)
    cfg = _cfg(tmp_path, "data.params.in_memory=false", "data.params.skip_bad=true")
    ds = load_dataset(cfg.data)
    assert len(ds.skipped) == 1 and where in ds.skipped[0]
    assert sum(len(ds.split(d, "all")) for d in ds.domains) == 47


def test_a_corrupt_image_met_lazily_names_its_manifest_row(tmp_path: Path) -> None:
    where = _corrupt_one(tmp_path)
    over = [
        "data.params.in_memory=false",
        f"output_dir={tmp_path / 'runs'}",
        "train.rounds=1",
        "model.params.widths=[8]",
        "lodo.targets=[site2]",
    ]
    with pytest.raises(DataError, match=rf"{where}: cannot read image .*skip_bad"):
        run_experiment(_cfg(tmp_path, *over))


def test_a_single_slide_domain_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_manifest_tree(tmp_path)
    rows = list(csv.DictReader(path.open()))
    for r in rows:
        if r["domain"] == "site1":
            r["slide"] = "only"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with caplog.at_level(logging.WARNING, logger="fedpath"):
        load_dataset(_cfg(tmp_path).data)
    assert "domain 'site1' has a single slide (site1/only)" in caplog.text
