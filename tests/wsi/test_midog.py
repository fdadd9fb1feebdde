"""MvMidog builder on generated MIDOG-style slides and annotation JSON."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from fedpath.config import ConfigError, load_config
from fedpath.data.base import DataError
from fedpath.data.manifest import read_manifest
from fedpath.runtime.experiment import load_dataset
from fedpath.wsi import cli as wsi_cli
from fedpath.wsi.midog import MvMidogParams, build_mvmidog
from fedpath.wsi.quality import QualityThresholds
from tests.wsi.helpers import he_image, tissue_edge, write_slide

W, H = 1600, 1200
# (centre, category, drawn): category 1 mitotic figure, 2 imposter
FIGURES: dict[int, list[tuple[tuple[int, int], int, bool]]] = {
    1: [
        ((400, 300), 1, True),
        ((700, 800), 1, True),
        ((30, 28), 1, True),  # near the top-left corner
        ((900, 500), 1, True),
        ((300, 900), 2, True),  # imposter
        ((1450, 600), 1, False),  # annotated on blank background: filtered out
    ],
    51: [((500, 400), 1, True), ((800, 700), 1, True), ((250, 1000), 1, True)],
}


def box(c: tuple[int, int]) -> list[float]:
    return [c[0] - 25.0, c[1] - 25.0, c[0] + 25.0, c[1] + 25.0]


def midog_json() -> dict[str, Any]:
    images = [
        {"id": i, "file_name": f"{i:03d}.tiff", "width": W, "height": H}
        for i in FIGURES
    ]
    anns = [
        {"image_id": i, "bbox": box(c), "category_id": cat}
        for i, figs in FIGURES.items()
        for c, cat, _ in figs
    ]
    for k, a in enumerate(anns):
        a["id"] = k + 1
    cats = [{"id": 1, "name": "mitotic figure"}, {"id": 2, "name": "hard negative"}]
    return {"images": images, "annotations": anns, "categories": cats}


@pytest.fixture(scope="module")
def midog(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("midog")
    for i, figs in FIGURES.items():
        drawn = [c for c, _, d in figs if d]
        write_slide(root / f"{i:03d}.tiff", he_image(W, H, i, drawn), levels=2)
    ann = root / "MIDOG.json"
    ann.write_text(json.dumps(midog_json()))
    return ann, root


def rows(out: Path) -> list[dict[str, str]]:
    with (out / "manifest.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def built(
    midog: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("mvmidog")
    return out, build_mvmidog(midog[0], midog[1], out, MvMidogParams(seed=3))


def test_positives_hold_their_figure_off_centre(
    built: tuple[Path, dict[str, Any]],
) -> None:
    out, report = built
    anns = midog_json()["annotations"]
    pos = [r for r in rows(out) if r["label"] == "mitotic_figure"]
    assert len(pos) == 7  # 8 mitotic figures, one on blank background rejected
    offsets = set()
    for r in pos:
        x0, y0, x1, y1 = anns[int(r["annotation"])]["bbox"]
        x, y = int(r["x"]), int(r["y"])
        assert x <= x0 and y <= y0 and x1 <= x + 128 and y1 <= y + 128
        assert 0 <= x <= W - 128 and 0 <= y <= H - 128
        offsets.add((x + 64 - (x0 + x1) / 2, y + 64 - (y0 + y1) / 2))
        img = np.asarray(Image.open(out / r["path"]))
        assert img.shape == (128, 128, 3)
    assert len(offsets) > 3  # not always centred
    corner = next(r for r in pos if anns[int(r["annotation"])]["bbox"][0] == 5.0)
    assert (int(corner["x"]), int(corner["y"])) == (0, 0)  # anchored in the corner
    assert report["domains"]["hamamatsu_xr"]["anchored"] == 1


def test_negatives_avoid_figures_and_lie_in_tissue(
    built: tuple[Path, dict[str, Any]],
) -> None:
    out, report = built
    neg = [r for r in rows(out) if r["kind"] == "random"]
    per_slide = {s: sum(r["slide"] == s for r in neg) for s in ("001.tiff", "051.tiff")}
    assert per_slide == {"001.tiff": 5, "051.tiff": 3}  # = mitotic figures
    edge = tissue_edge(W, H)
    for r in neg:
        x, y = int(r["x"]), int(r["y"])
        i = int(r["slide"][:3])
        for c, cat, _ in FIGURES[i]:
            if cat == 1:
                b = box(c)
                far = (
                    b[2] <= x - 64
                    or b[0] >= x + 128 + 64
                    or b[3] <= y - 64
                    or b[1] >= y + 128 + 64
                )
                assert far, (r, c)
        assert np.clip((edge[y : y + 128] - x) / 128, 0, 1).mean() >= 0.4
    imposters = [r for r in rows(out) if r["kind"] == "imposter"]
    assert len(imposters) == 1 and imposters[0]["label"] == "negative"
    assert report["domains"]["hamamatsu_xr"]["negatives"] == 6


def test_manifest_loads_as_a_dataset(built: tuple[Path, dict[str, Any]]) -> None:
    out, _ = built
    rec = read_manifest(out / "manifest.csv")
    assert set(rec.domains) == {"hamamatsu_xr", "hamamatsu_s360"}
    assert set(rec.labels) == {"mitotic_figure", "negative"}
    cfg = load_config(
        None,
        ["data.name=manifest", f"data.root={out}", "data.params.image_size=32"],
    )
    ds = load_dataset(cfg.data)
    assert ds.classes == ["mitotic_figure", "negative"]
    assert ds.domains == ["hamamatsu_xr", "hamamatsu_s360"]
    assert len(ds.labels) == len(rec.paths)


def test_quality_filter_rejects_blank_crops(
    built: tuple[Path, dict[str, Any]],
) -> None:
    _, report = built
    dom = report["domains"]["hamamatsu_xr"]
    assert dom["rejected_mitotic_figure_background"] == 1


def test_build_is_deterministic_resumable_and_atomic(
    midog: tuple[Path, Path], built: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    out, _ = built
    first = (out / "manifest.csv").read_text()
    again = build_mvmidog(*midog, out, MvMidogParams(seed=3))
    assert again["built"] == 0 and again["resumed"] == 2
    assert (out / "manifest.csv").read_text() == first
    # an interrupted slide (no ledger entry, a stray file) is redone, same result
    copy = tmp_path / "copy"
    rep = build_mvmidog(*midog, copy, MvMidogParams(seed=3))
    (copy / ".mvmidog" / "51.json").unlink()
    stray = copy / "patches" / "hamamatsu_s360" / "051" / "stray.png"
    stray.write_bytes(b"")
    rep = build_mvmidog(*midog, copy, MvMidogParams(seed=3))
    assert (rep["built"], rep["resumed"]) == (1, 1) and not stray.exists()
    assert (copy / "manifest.csv").read_text() == first
    assert not [p for p in copy.rglob("*") if p.name.endswith(".tmp")]
    with pytest.raises(ConfigError, match="other settings"):
        build_mvmidog(*midog, copy, MvMidogParams(seed=4))


def test_bbox_formats_give_the_same_patches(
    midog: tuple[Path, Path], built: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    data = midog_json()
    for a in data["annotations"]:
        x0, y0, x1, y1 = a["bbox"]
        a["bbox"] = [x0, y0, x1 - x0, y1 - y0]
    js = tmp_path / "xywh.json"
    js.write_text(json.dumps(data))
    out = tmp_path / "o"
    build_mvmidog(js, midog[1], out, MvMidogParams(seed=3, bbox_format="xywh"))
    assert (out / "manifest.csv").read_text() == (built[0] / "manifest.csv").read_text()


def _bad_json(tmp_path: Path, **change: Any) -> Path:
    data = midog_json()
    data["annotations"].append(
        {"id": 99, "image_id": 1, "bbox": [10, 10, 60, 60], "category_id": 1} | change
    )
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    return path


def test_bad_input_names_file_and_entry_or_is_counted(
    midog: tuple[Path, Path], tmp_path: Path
) -> None:
    idx = len(midog_json()["annotations"])
    js = _bad_json(tmp_path, image_id=999)
    with pytest.raises(DataError, match=rf"bad\.json: annotations\[{idx}\]: image_id"):
        build_mvmidog(js, midog[1], tmp_path / "a")
    rep = build_mvmidog(js, midog[1], tmp_path / "b", skip_bad=True)
    assert len(rep["bad"]) == 1 and f"annotations[{idx}]" in rep["bad"][0]
    assert rep["built"] == 2
    js = _bad_json(tmp_path, bbox=[1700, 10, 1750, 60])  # outside the 1600 px slide
    with pytest.raises(DataError, match=rf"001\.tiff.*annotations\[{idx}\].*outside"):
        build_mvmidog(js, midog[1], tmp_path / "c")
    for resumed in (0, 2):  # the skipped entry is reported again on resume
        rep = build_mvmidog(js, midog[1], tmp_path / "c2", skip_bad=True)
        assert rep["resumed"] == resumed and len(rep["bad"]) == 1
        assert f"annotations[{idx}]" in rep["bad"][0]
    js = _bad_json(tmp_path, bbox=[60, 60, 10, 10])  # x1 < x0: not xyxy
    with pytest.raises(DataError, match=rf"annotations\[{idx}\]: bbox .* xyxy"):
        build_mvmidog(js, midog[1], tmp_path / "d")
    slides = tmp_path / "slides"
    slides.mkdir()
    (slides / "001.tiff").write_bytes(b"corrupt")
    with pytest.raises(DataError, match=r"001\.tiff"):
        build_mvmidog(midog[0], slides, tmp_path / "e")
    rep = build_mvmidog(midog[0], slides, tmp_path / "f", skip_bad=True)
    assert rep["built"] == 0 and len(rep["bad"]) == 2  # corrupt 001, absent 051
    assert "051.tiff" in " ".join(rep["bad"])
    assert all(b.startswith(f"{midog[0]}: image id ") for b in rep["bad"])


def test_cli_mvmidog(
    midog: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = argparse.ArgumentParser(prog="fedpath")
    wsi_cli.register(p.add_subparsers(dest="command", required=True))
    smap = tmp_path / "scanners.csv"
    smap.write_text("file_name,scanner\n001.tiff,site_a\n051.tiff,site_b\n")
    args = p.parse_args(
        [
            *("mvmidog", str(midog[0]), str(midog[1]), "-o", str(tmp_path / "o")),
            *("--scanner-map", str(smap), "--negatives-per-slide", "2"),
            "--no-imposters",
        ]
    )
    assert wsi_cli.run(args) == 0
    text = capsys.readouterr().out
    assert "site_a: 1 slides, 4 positives, 2 negatives" in text
    assert "rejected: mitotic_figure/background 1" in text
    assert {r["domain"] for r in rows(tmp_path / "o")} == {"site_a", "site_b"}


def test_cli_defaults_are_the_builder_defaults(midog: tuple[Path, Path]) -> None:
    p = argparse.ArgumentParser(prog="fedpath")
    wsi_cli.register(p.add_subparsers(dest="command", required=True))
    args = vars(p.parse_args(["mvmidog", "a.json", "dir", "-o", "out"]))
    params, quality = MvMidogParams(), QualityThresholds()
    for name in (
        "seed",
        "patch_size",
        "max_offset",
        "border_attempts",
        "negatives_per_slide",
        "margin",
        "bbox_format",
        "scanner_field",
        "tissue_threshold",
        "mask_size",
    ):
        assert args[name] == getattr(params, name), name
    for name in ("min_nonwhite", "white_level", "min_edge", "min_saturation_std"):
        assert args[name] == getattr(quality, name), name
