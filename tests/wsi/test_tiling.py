"""Tissue tiling into CLAM's h5 coords layout (fedpath.wsi.tiling)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from fedpath.cli import main
from fedpath.data.base import DataError
from fedpath.wsi import cli as wsi_cli
from fedpath.wsi.slide import open_slide
from fedpath.wsi.tiling import patch_geometry, tile_slides
from tests.wsi.helpers import tissue_edge


def test_tile_slides_writes_clam_h5_in_tissue_and_resumes(
    tmp_path: Path, slide_file: tuple[Path, list]
) -> None:
    path, _ = slide_file
    out = tmp_path / "tiles"
    rep = tile_slides([path], out, patch_size=256, tissue_threshold=0.5)
    h5 = out / "patches" / "slide_a.h5"
    assert rep.done == ["slide_a"] and rep.patches > 0 and h5.is_file()
    assert (out / "masks" / "slide_a.png").is_file()
    with h5py.File(h5) as fh:
        coords = fh["coords"][:]
        attrs = dict(fh["coords"].attrs)
    assert coords.dtype == np.int64 and coords.shape[1] == 2
    for key in ("patch_size", "patch_level", "downsample", "level_dim", "name"):
        assert key in attrs
    assert attrs["patch_size"] == 256 and attrs["patch_level"] == 0
    assert attrs["name"] == "slide_a" and list(attrs["level_dim"]) == [3000, 2000]
    assert np.all(coords % 256 == 0)  # on the grid
    edge = tissue_edge(3000, 2000)
    for x, y in coords:  # in tissue: most of the patch left of the boundary
        frac = np.clip((edge[y : y + 256] - x) / 256, 0, 1).mean()
        assert frac >= 0.4
    # every patch fully inside the tissue is kept
    full = [
        (x, y)
        for y in range(0, 2000 - 255, 256)
        for x in range(0, 3000 - 255, 256)
        if x + 256 <= edge[y : y + 256].min()
    ]
    assert set(full) <= {tuple(c) for c in coords.tolist()}
    mtime = h5.stat().st_mtime_ns
    again = tile_slides([path], out)
    assert again.resumed == ["slide_a"] and not again.done
    assert h5.stat().st_mtime_ns == mtime
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_tiling_at_a_magnification_uses_the_matching_level(
    tmp_path: Path, slide_file: tuple[Path, list]
) -> None:
    path, _ = slide_file
    with open_slide(path) as s:
        g = patch_geometry(s, 256, magnification=20)
        assert (g.level, g.read_size, g.step0) == (1, 256, 512)
        g = patch_geometry(s, 256, magnification=15)  # no level: read finer, resize
        assert g.level == 1 and g.read_size == round(256 * 40 / 15 / 2)
        with pytest.raises(DataError, match="scanned at 40x"):
            patch_geometry(s, 256, magnification=80)
    rep = tile_slides([path], tmp_path, patch_size=128, magnification=20)
    with h5py.File(tmp_path / "patches" / "slide_a.h5") as fh:
        assert fh["coords"].attrs["patch_level"] == 1
        assert np.all(fh["coords"][:] % 256 == 0)
    assert rep.patches == len(h5py.File(tmp_path / "patches/slide_a.h5")["coords"])


def test_tiling_skips_and_counts_bad_slides_and_is_atomic(
    tmp_path: Path, slide_file: tuple[Path, list], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "broken.tif"
    bad.write_bytes(b"\x00" * 100)
    with pytest.raises(DataError, match=r"broken\.tif"):
        tile_slides([slide_file[0], bad], tmp_path / "a")
    rep = tile_slides([slide_file[0], bad], tmp_path / "b", skip_bad=True)
    assert rep.done == ["slide_a"] and len(rep.bad) == 1 and "broken.tif" in rep.bad[0]
    assert "1 unreadable" in rep.summary("tile")

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(h5py.File, "create_dataset", crash)
    with pytest.raises(RuntimeError):
        tile_slides([slide_file[0]], tmp_path / "c")
    assert not list((tmp_path / "c" / "patches").iterdir())  # no file, no temp


# the tile and features stages end to end through the command line
def wsi_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fedpath")
    wsi_cli.register(p.add_subparsers(dest="command", required=True))
    return p


def test_cli_tile_and_features(
    tmp_path: Path,
    slide_file: tuple[Path, list],
    capsys: pytest.CaptureFixture[str],
) -> None:
    slides = tmp_path / "in"
    slides.mkdir()
    os.symlink(slide_file[0], slides / "slide_a.tif")
    (slides / "notes.txt").write_text("not a slide")
    out = tmp_path / "out"
    # through the real command line (fedpath.cli.main wires fedpath.wsi.cli)
    assert main(["tile", str(slides), "-o", str(out), "--level", "2"]) == 0
    assert "1 slides processed" in capsys.readouterr().out
    args = [
        *("features", str(slides), "--coords", str(out), "-o", str(out), "-q"),
        *("--param", "widths=[8]", "--input-size", "32", "--save-pt"),
    ]
    assert main(args) == 0
    with h5py.File(out / "h5_files" / "slide_a.h5") as fh:
        assert fh["features"].shape[1] == 8
    for cmd in ("tile", "features", "mvmidog"):
        with pytest.raises(SystemExit) as exc:
            wsi_parser().parse_args([cmd, "--help"])
        assert exc.value.code == 0
    bad = wsi_parser().parse_args(["tile", str(tmp_path / "nope.tif"), "-o", str(out)])
    with pytest.raises(DataError, match=r"nope\.tif"):
        wsi_cli.run(bad)
    assert main(["tile", str(tmp_path / "nope.tif"), "-o", str(out)]) == 2
    assert "nope.tif" in capsys.readouterr().err
