"""AMi-Br builder on generated MIDOG/TUPAC-style TIFF images and an AMI-BR-style CSV."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tifffile
from PIL import Image

from fedpath.cli import main
from fedpath.config import ConfigError
from fedpath.data.manifest import read_manifest
from fedpath.errors import DataError
from fedpath.wsi.amibr import AmiBrReport, build_amibr, crop_figure
from fedpath.wsi.slide import open_slide

W, H = 400, 300
HEADER = (
    ",slide,dataset,uid,x,y,expert1_label,expert2_label,expert1_atypical,"
    "expert2_atypical,expert3_atypical,majority_atypical"
)
# (slide, dataset, uid, x, y, majority_atypical)
Row = tuple[str, str, str, int | str, int | str, str]
ROWS: list[Row] = [
    ("002.tiff", "MIDOG21", "6", 200, 150, "False"),
    ("002.tiff", "MIDOG21", "7", 10, 5, "True"),  # near the top-left corner
    ("060.tiff", "MIDOG21", "11", 399, 299, "False"),  # the bottom-right pixel
    ("120.tiff", "MIDOG21", "12", 64, 64, "true"),
    ("01_stitched1.tif", "TUPAC16", "3", 100, 200, "False"),
    ("24.tif", "TUPAC16", "7", 300, 100, "True"),  # uid 7 again, other dataset
    ("24.tif", "TUPAC16", "4", 50, 250, "False"),
]
# votes: a unanimous normal (1.0), a 2-of-3 atypical (0.6667)
MANIFEST = (
    "path,label,domain,slide,majority_atypical,agreement\r\n"
    "patches/normal/MIDOG21_11.png,normal,MIDOG21_HamamatsuS360,060.tiff,False,1.0000\r\n"
    "patches/normal/MIDOG21_6.png,normal,MIDOG21_HamamatsuXR,002.tiff,False,1.0000\r\n"
    "patches/normal/TUPAC16_3.png,normal,TUPAC16,01_stitched1.tif,False,1.0000\r\n"
    "patches/normal/TUPAC16_4.png,normal,TUPAC16,24.tif,False,1.0000\r\n"
    "patches/atypical/MIDOG21_12.png,atypical,MIDOG21_AperioCS2,120.tiff,True,0.6667\r\n"
    "patches/atypical/MIDOG21_7.png,atypical,MIDOG21_HamamatsuXR,002.tiff,True,0.6667\r\n"
    "patches/atypical/TUPAC16_7.png,atypical,TUPAC16,24.tif,True,0.6667\r\n"
)


def table(rows: Sequence[Row], header: str = HEADER) -> str:
    lines = [header]
    for i, (slide, ds, uid, x, y, maj) in enumerate(rows):
        votes = "True,False,True" if maj.lower() == "true" else "False,False,False"
        lines.append(f"{i},{slide},{ds},{uid},{x},{y},NMF,NMF,{votes},{maj}")
    return "\n".join(lines) + "\n"


def write_image(path: Path, seed: int, tiled: bool = True) -> np.ndarray:
    img = np.random.default_rng(seed).integers(0, 256, (H, W, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    kw = {"tile": (64, 64)} if tiled else {"rowsperstrip": 16}
    tifffile.imwrite(path, img, photometric="rgb", compression="zlib", **kw)
    return img


@dataclass
class Src:
    """The generated inputs: table, image folders and each image's pixels."""

    ann: Path
    midog: Path
    tupac: Path
    images: dict[str, np.ndarray]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Src:
    root = tmp_path_factory.mktemp("amibr_src")
    images = {
        "002.tiff": write_image(root / "midog" / "002.tiff", 2),
        "060.tiff": write_image(root / "midog" / "060.tiff", 60, tiled=False),
        # below the folder: found by the recursive search
        "120.tiff": write_image(root / "midog" / "scanner_c" / "120.tiff", 120),
        "01_stitched1.tif": write_image(root / "tupac" / "01_stitched1.tif", 1),
        "24.tif": write_image(root / "tupac" / "24.tif", 24),
    }
    ann = root / "AMI-BR.csv"
    ann.write_text(table(ROWS))
    return Src(ann, root / "midog", root / "tupac", images)


def build(data: Src, out: Path, **kw: Any) -> AmiBrReport:
    args: dict[str, Any] = {"midog": data.midog, "tupac": data.tupac, **kw}
    return build_amibr(data.ann, out, **args)


def png(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        assert im.mode == "RGB"
        return np.asarray(im)


@pytest.fixture(scope="module")
def built(
    data: Src, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, AmiBrReport]:
    out = tmp_path_factory.mktemp("amibr")
    return out, build(data, out)


def test_cli_module_imports_without_torch() -> None:
    code = "import sys, fedpath.wsi.cli; print('torch' in sys.modules)"
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert res.stdout.strip() == "False"


def test_crop_is_the_source_around_the_centre(
    built: tuple[Path, AmiBrReport], data: Src
) -> None:
    out, _ = built
    img = data.images["002.tiff"]
    crop = png(out / "patches" / "normal" / "MIDOG21_6.png")
    assert crop.shape == (128, 128, 3)
    # the figure's pixel (x, y) = (200, 150) is the crop's [64, 64]
    np.testing.assert_array_equal(crop, img[150 - 64 : 150 + 64, 200 - 64 : 200 + 64])
    np.testing.assert_array_equal(crop[64, 64], img[150, 200])


def test_odd_and_even_sizes_put_the_figure_at_size_over_two(
    data: Src,
) -> None:
    img = data.images["24.tif"]
    with open_slide(data.tupac / "24.tif") as slide:
        for size in (16, 17):
            crop = crop_figure(slide, 300, 100, size, 255)
            c = size // 2
            np.testing.assert_array_equal(
                crop, img[100 - c : 100 - c + size, 300 - c : 300 - c + size]
            )
            np.testing.assert_array_equal(crop[c, c], img[100, 300])


def test_border_crops_are_padded_white_or_black(
    built: tuple[Path, AmiBrReport], data: Src, tmp_path: Path
) -> None:
    out, _ = built
    img = data.images["002.tiff"]
    # (x, y) = (10, 5): the crop starts at (-54, -59)
    crop = png(out / "patches" / "atypical" / "MIDOG21_7.png")
    assert (crop[:59] == 0).all() and (crop[:, :54] == 0).all()  # default black
    np.testing.assert_array_equal(crop[59:, 54:], img[:69, :74])
    np.testing.assert_array_equal(crop[64, 64], img[5, 10])
    # the bottom-right pixel (399, 299): the crop's [64, 64], black beyond
    corner = png(out / "patches" / "normal" / "MIDOG21_11.png")
    ref = data.images["060.tiff"]
    np.testing.assert_array_equal(corner[:65, :65], ref[235:, 335:])
    assert (corner[65:] == 0).all() and (corner[:, 65:] == 0).all()

    white = tmp_path / "white"
    build(data, white, pad="white")
    crop = png(white / "patches" / "atypical" / "MIDOG21_7.png")
    assert (crop[:59] == 255).all() and (crop[:, :54] == 255).all()
    np.testing.assert_array_equal(crop[59:, 54:], img[:69, :74])


def test_manifest_rows_domains_and_labels(built: tuple[Path, AmiBrReport]) -> None:
    out, report = built
    assert (out / "manifest.csv").read_bytes() == MANIFEST.encode()
    for line in MANIFEST.splitlines()[1:]:
        path, label, *_ = line.split(",")
        assert path.split("/")[1] == label
        assert png(out / path).shape == (128, 128, 3)
    assert sorted(p.name for p in (out / "patches").rglob("*.png")) == sorted(
        line.split(",")[0].split("/")[2] for line in MANIFEST.splitlines()[1:]
    )
    rec = read_manifest(out / "manifest.csv")  # what `data.name: manifest` reads
    assert set(rec.labels) == {"normal", "atypical"}
    assert report.counts == {
        "MIDOG21_HamamatsuXR": {"normal": 1, "atypical": 1},
        "MIDOG21_HamamatsuS360": {"normal": 1, "atypical": 0},
        "MIDOG21_AperioCS2": {"normal": 0, "atypical": 1},
        "TUPAC16": {"normal": 2, "atypical": 1},
    }
    assert report.slides == {
        "MIDOG21_HamamatsuXR": 1,
        "MIDOG21_HamamatsuS360": 1,
        "MIDOG21_AperioCS2": 1,
        "TUPAC16": 2,
    }
    text = report.summary()
    assert "| domain | normal | atypical | slides |" in text
    assert "| TUPAC16 | 2 | 1 | 2 |" in text
    assert "| total | 4 | 3 | 5 |" in text
    assert report.written == 7 and report.bad == [] and report.left_out == {}


def test_rerun_writes_nothing_and_the_same_manifest(
    data: Src, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    build(data, out, quiet=False)
    assert "amibr" in capsys.readouterr().err  # the progress bar over slides
    first = (out / "manifest.csv").read_bytes()
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.png")}
    again = build(data, out)
    assert (again.written, again.existing, again.opened) == (0, 7, 0)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.png")} == stamps
    assert (out / "manifest.csv").read_bytes() == first
    # an interrupted run: a missing crop is made again, only its slide read
    (out / "patches" / "normal" / "TUPAC16_3.png").unlink()
    resumed = build(data, out)
    assert (resumed.written, resumed.opened) == (1, 1)
    assert (out / "manifest.csv").read_bytes() == first
    with pytest.raises(ConfigError, match="other settings"):
        build(data, out, size=64)


def test_relabelled_figure_moves_to_its_class(data: Src, tmp_path: Path) -> None:
    out = tmp_path / "o"
    build(data, out)
    ann = tmp_path / "relabelled.csv"
    ann.write_text(table([(*ROWS[0][:5], "True"), *ROWS[1:]]))
    build_amibr(ann, out, data.midog, data.tupac)
    assert (out / "patches" / "atypical" / "MIDOG21_6.png").is_file()
    assert not (out / "patches" / "normal" / "MIDOG21_6.png").exists()


def test_one_dataset_only_leaves_the_other_out(data: Src, tmp_path: Path) -> None:
    report = build(data, tmp_path / "o", tupac=None)
    assert report.left_out == {"TUPAC16": 3}
    assert "left out: 3 TUPAC16 rows (no --tupac folder given)" in report.summary()
    assert set(report.counts) == {
        "MIDOG21_HamamatsuXR",
        "MIDOG21_HamamatsuS360",
        "MIDOG21_AperioCS2",
    }
    text = (tmp_path / "o" / "manifest.csv").read_text()
    assert "TUPAC16" not in text and text.count("\n") == 5
    with pytest.raises(ConfigError, match="--midog.*--tupac"):
        build(data, tmp_path / "p", midog=None, tupac=None)


# ------------------------------------------------------------------ bad input


def _ann(tmp_path: Path, rows: Sequence[Row], header: str = HEADER) -> Path:
    path = tmp_path / "bad.csv"
    path.write_text(table(rows, header))
    return path


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            ("002.tiff", "CAMELYON", "1", 5, 5, "False"),
            r"bad.csv' line 2: column 'dataset' is 'CAMELYON'; expected MIDOG21 "
            r"or TUPAC16",
        ),
        (
            ("151.tiff", "MIDOG21", "1", 5, 5, "False"),
            r"line 2: MIDOG21 slide '151.tiff' is a Leica GT450 image",
        ),
        (
            ("abc.tiff", "MIDOG21", "1", 5, 5, "False"),
            r"slide 'abc.tiff': expected a MIDOG 2021 image name like '001.tiff'",
        ),
        (
            ("002.tiff", "MIDOG21", "1", "abc", 5, "False"),
            r"line 2: column 'x' is 'abc'; expected a pixel coordinate >= 0",
        ),
        (
            ("002.tiff", "MIDOG21", "1", 5, -3, "False"),
            r"column 'y' is '-3'; expected a pixel coordinate",
        ),
        (
            ("002.tiff", "MIDOG21", "1", 5, 5, "maybe"),
            r"column 'majority_atypical' is 'maybe'; expected True or False",
        ),
        (
            ("002.tiff", "MIDOG21", "../x", 5, 5, "False"),
            r"column 'uid' is '../x'",
        ),
        (("002.tiff", "MIDOG21", "1", "", 5, "False"), r"column 'x' is empty"),
    ],
)
def test_bad_rows_name_file_line_and_column(
    data: Src, tmp_path: Path, row: Row, message: str
) -> None:
    ann = _ann(tmp_path, [row, ROWS[0]])
    with pytest.raises(DataError, match=message):
        build_amibr(ann, tmp_path / "o", data.midog)
    # with skip_bad the row is counted and the others are built
    rep = build_amibr(ann, tmp_path / "o", data.midog, skip_bad=True)
    assert len(rep.bad) == 1 and "line 2" in rep.bad[0]
    assert rep.total == 1 and "skipped (1):" in rep.summary()


def test_missing_columns(data: Src, tmp_path: Path) -> None:
    ann = _ann(tmp_path, [], header=",slide,dataset,uid,y,expert1_label")
    with pytest.raises(
        DataError,
        match=r"bad.csv': missing column\(s\) 'x', 'majority_atypical'; expected "
        r"the AMi-Br table with columns slide, dataset, uid, x, y, majority_atypical",
    ):
        build_amibr(ann, tmp_path / "o", data.midog, skip_bad=True)


def test_duplicate_uid(data: Src, tmp_path: Path) -> None:
    ann = _ann(tmp_path, [ROWS[0], ROWS[0]])
    with pytest.raises(DataError, match=r"line 3: MIDOG21 uid 6 is also on line 2"):
        build_amibr(ann, tmp_path / "o", data.midog)


def test_missing_image_names_slide_and_folder(data: Src, tmp_path: Path) -> None:
    ann = _ann(tmp_path, [ROWS[0], ("003.tiff", "MIDOG21", "9", 5, 5, "False")])
    folder = str(data.midog)
    with pytest.raises(
        DataError,
        match=rf"line 3: MIDOG21 slide '003.tiff' \(1 rows\): no image file "
        rf"'003.tiff' in the --midog folder '{folder}' or its subfolders",
    ):
        build_amibr(ann, tmp_path / "o", data.midog)
    rep = build_amibr(ann, tmp_path / "o", data.midog, skip_bad=True)
    assert rep.total == 1 and len(rep.bad) == 1
    assert "'003.tiff'" in rep.bad[0] and "1 crops not made" in rep.bad[0]
    with pytest.raises(DataError, match=r"--tupac folder '.*nowhere' does not exist"):
        build_amibr(ann, tmp_path / "o", tupac=tmp_path / "nowhere")


def test_centre_outside_the_image(data: Src, tmp_path: Path) -> None:
    ann = _ann(tmp_path, [ROWS[0], ("002.tiff", "MIDOG21", "9", W, 5, "False")])
    with pytest.raises(
        DataError,
        match=r"line 3: MIDOG21 uid 9 at x=400, y=5 lies outside '.*002.tiff' "
        r"\(400x300 pixels\)",
    ):
        build_amibr(ann, tmp_path / "o", data.midog)
    rep = build_amibr(ann, tmp_path / "o2", data.midog, skip_bad=True)
    assert rep.total == 1 and "lies outside" in rep.bad[0]


def test_size_below_16(data: Src, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least 16 px, got 15"):
        build(data, tmp_path / "o", size=15)


# ------------------------------------------------------------------ command line


def test_cli_amibr(
    data: Src, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    argv = [
        *("amibr", "--annotations", str(data.ann)),
        *("--midog", str(data.midog), "--tupac", str(data.tupac)),
        *("--out", str(out), "--quiet"),
    ]
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert "| MIDOG21_HamamatsuXR | 1 | 1 | 1 |" in cap.out
    assert "7 crops (7 written, 0 already there" in cap.out
    assert cap.err == ""  # --quiet: no progress bar
    assert (out / "manifest.csv").read_bytes() == MANIFEST.encode()
    with pytest.raises(SystemExit) as exit_:  # refused by the parser
        main([*argv, "--size", "8"])
    assert exit_.value.code == 2
    assert "--size: expected an integer >= 16" in capsys.readouterr().err
