"""Slide reading, tissue tiling and feature extraction on a generated pyramidal TIFF."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import tifffile
import torch
import torch.nn.functional as F
from scipy import ndimage

from fedpath.cli import main
from fedpath.config import ModelConfig
from fedpath.data.base import DataError
from fedpath.models.backbones import build_model
from fedpath.models.pretrained import state_digest
from fedpath.wsi import cli as wsi_cli
from fedpath.wsi.features import extract_features, extract_features_stage
from fedpath.wsi.slide import find_slides, open_slide
from fedpath.wsi.tiling import patch_geometry, tile_slides
from fedpath.wsi.tissue import TissueMap, tissue_mask

H_OD = np.array([0.65, 0.70, 0.29], dtype=np.float32)  # haematoxylin (Ruifrok)
E_OD = np.array([0.07, 0.99, 0.11], dtype=np.float32)  # eosin


def tissue_edge(width: int, height: int) -> np.ndarray:
    """x of the tissue/background boundary per row: tissue left of it."""
    y = np.arange(height)
    return 0.65 * width + 0.05 * width * np.sin(2 * np.pi * y / height)


def he_image(
    width: int,
    height: int,
    seed: int = 0,
    figures: list[tuple[int, int]] | None = None,
) -> np.ndarray:
    """Synthetic H&E: pink stroma, purple nuclei, white background on the right.

    ``figures``: centres of dark, dense 'mitotic figures' (drawn in any region).
    """
    rng = np.random.default_rng(seed)
    xx = np.arange(width, dtype=np.float32)[None, :]
    tissue = xx < tissue_edge(width, height).astype(np.float32)[:, None]
    low = rng.random((height // 32 + 2, width // 32 + 2), dtype=np.float32)
    smooth = ndimage.zoom(low, 32, order=1)[:height, :width]
    seeds = (rng.random((height, width), dtype=np.float32) < 0.004).astype(np.float32)
    nuclei = ndimage.gaussian_filter(seeds, 2.5) > 0.012
    e = np.where(tissue, 0.25 + 0.25 * smooth, np.float32(0))
    h = np.where(tissue & nuclei, 0.9 + 0.3 * smooth, 0.05 * tissue.astype(np.float32))
    for cx, cy in figures or []:  # an ellipse drawn in a window around the centre
        y0, x0 = max(cy - 12, 0), max(cx - 16, 0)
        wy, wx = np.ogrid[y0 : cy + 12, x0 : cx + 16]
        blob = (wx - cx) ** 2 / 14**2 + (wy - cy) ** 2 / 9**2 <= 1.0
        h[y0 : cy + 12, x0 : cx + 16][blob] = 1.8
        e[y0 : cy + 12, x0 : cx + 16][blob] = 0.3
    od = h[..., None] * H_OD + e[..., None] * E_OD
    noise = rng.standard_normal(od.shape, dtype=np.float32) * 2.0
    rgb = 246.0 * np.exp(-od) + noise
    return np.clip(rgb, 0, 255).astype(np.uint8)


def block_mean(arr: np.ndarray, k: int) -> np.ndarray:
    h, w = arr.shape[0] // k * k, arr.shape[1] // k * k
    blocks = arr[:h, :w].reshape(h // k, k, w // k, k, 3).astype(np.float32)
    return np.rint(blocks.mean(axis=(1, 3))).astype(np.uint8)


def write_slide(
    path: Path, level0: np.ndarray, levels: int = 3, mpp: float = 0.25
) -> list[np.ndarray]:
    """Tiled pyramidal TIFF (reduced-resolution pages), lossless; returns levels."""
    arrays = [level0] + [block_mean(level0, 2**i) for i in range(1, levels)]
    res = (1e4 / mpp, 1e4 / mpp)
    with tifffile.TiffWriter(path) as tw:
        for i, arr in enumerate(arrays):
            tw.write(
                arr,
                tile=(256, 256),
                compression="zlib",
                photometric="rgb",
                subfiletype=1 if i else 0,
                resolution=(res[0] / 2**i, res[1] / 2**i),
                resolutionunit="CENTIMETER",
            )
    return arrays


@pytest.fixture(scope="module")
def slide_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    root = tmp_path_factory.mktemp("slides")
    path = root / "slide_a.tif"
    return path, write_slide(path, he_image(3000, 2000, seed=1))


# ------------------------------------------------------------------ reading


def test_read_region_matches_the_written_levels(slide_file: tuple[Path, list]) -> None:
    path, arrays = slide_file
    with open_slide(path) as s:
        assert s.dimensions == (3000, 2000)
        assert s.level_count == 3
        assert s.level_dimensions == ((3000, 2000), (1500, 1000), (750, 500))
        assert s.level_downsamples == pytest.approx((1.0, 2.0, 4.0))
        assert s.mpp == pytest.approx(0.25)
        assert s.objective_power == pytest.approx(40.0)
        # a region across tile borders at level 0, and one at level 1
        r0 = s.read_region(250, 500, 0, 300, 140)
        assert r0.dtype == np.uint8 and r0.shape == (140, 300, 3)
        assert np.array_equal(r0, arrays[0][500:640, 250:550])
        r1 = s.read_region(1000, 600, 1, 200, 100)  # level-0 corner, level-1 size
        assert np.array_equal(r1, arrays[1][300:400, 500:700])
        r2 = s.read_region(2800, 1800, 2, 50, 50)  # last partial tile
        assert np.array_equal(r2, arrays[2][450:500, 700:750])


def test_out_of_bounds_raises_or_pads(slide_file: tuple[Path, list]) -> None:
    path, arrays = slide_file
    with open_slide(path) as s:
        with pytest.raises(DataError, match=r"slide_a\.tif.*x=2900, y=10.*outside"):
            s.read_region(2900, 10, 0, 200, 50)
        with pytest.raises(DataError, match="outside"):
            s.read_region(-1, 0, 0, 10, 10)
        with pytest.raises(DataError, match="level 5 does not exist"):
            s.read_region(0, 0, 5, 10, 10)
        padded = s.read_region(2900, -20, 0, 200, 50, pad=True)
        assert np.all(padded[:20] == 255) and np.all(padded[:, 100:] == 255)
        assert np.array_equal(padded[20:, :100], arrays[0][0:30, 2900:3000])


def test_thumbnail_is_small_and_faithful(slide_file: tuple[Path, list]) -> None:
    path, arrays = slide_file
    with open_slide(path) as s:
        thumb = s.get_thumbnail(300)
    assert thumb.shape == (200, 300, 3)
    ref = block_mean(arrays[0], 10).astype(np.float32)
    assert np.abs(thumb.astype(np.float32) - ref).mean() < 6.0


def test_reads_decode_tiles_never_a_whole_page(
    slide_file: tuple[Path, list], monkeypatch: pytest.MonkeyPatch
) -> None:
    def whole_page(*args: object, **kwargs: object) -> None:
        raise AssertionError("a whole TIFF page was decoded")

    monkeypatch.setattr(tifffile.TiffPage, "asarray", whole_page)
    monkeypatch.setattr(tifffile.TiffPageSeries, "asarray", whole_page)
    path, arrays = slide_file
    with open_slide(path) as s:
        assert np.array_equal(s.read_region(0, 0, 0, 64, 64), arrays[0][:64, :64])
        assert s.get_thumbnail(256).shape == (171, 256, 3)


def test_bad_slides_raise_data_error_naming_the_file(
    tmp_path: Path, slide_file: tuple[Path, list]
) -> None:
    with pytest.raises(DataError, match=r"missing\.tif.*does not exist"):
        open_slide(tmp_path / "missing.tif")
    junk = tmp_path / "junk.tif"
    junk.write_bytes(b"this is not a tiff at all" * 40)
    with pytest.raises(DataError, match=r"junk\.tif"):
        open_slide(junk)
    cut = tmp_path / "cut.tif"
    data = slide_file[0].read_bytes()
    cut.write_bytes(data[: len(data) // 3])
    # the header may parse; the tiles cannot
    with pytest.raises(DataError, match=r"cut\.tif"), open_slide(cut) as s:
        s.read_region(0, 1900, 0, 3000, 100)


def test_openslide_backend_agrees(slide_file: tuple[Path, list]) -> None:
    pytest.importorskip("openslide")
    path, arrays = slide_file
    with open_slide(path, backend="openslide") as s:
        assert s.level_dimensions == ((3000, 2000), (1500, 1000), (750, 500))
        assert np.array_equal(
            s.read_region(250, 500, 0, 300, 140), arrays[0][500:640, 250:550]
        )
        assert np.array_equal(
            s.read_region(1000, 600, 1, 200, 100), arrays[1][300:400, 500:700]
        )


# ------------------------------------------------------------------ tiling


def test_tissue_mask_finds_the_tissue(slide_file: tuple[Path, list]) -> None:
    path, _ = slide_file
    with open_slide(path) as s:
        thumb = s.get_thumbnail(600)
    mask = tissue_mask(thumb)
    truth = np.arange(600)[None, :] < tissue_edge(3000, 2000)[::5][:, None] / 5
    iou = (mask & truth).sum() / (mask | truth).sum()
    assert iou > 0.95
    assert not tissue_mask(np.full((64, 64, 3), 245, np.uint8)).any()


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


def test_tissue_map_fraction_is_exact_on_aligned_boxes() -> None:
    mask = np.zeros((10, 20), bool)
    mask[:, :5] = True
    tm = TissueMap(mask, (200, 100))  # 10 level-0 px per mask px
    frac = tm.fraction(np.array([[0, 0], [30, 0], [100, 50]]), 40, 40)
    assert frac == pytest.approx([1.0, 0.5, 0.0])


# ------------------------------------------------------------------ features


def _weights(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    model = build_model(ModelConfig(params={"widths": [8, 16]}), 2)
    path = tmp_path / "enc.pt"
    torch.save(model.state_dict(), path)
    return path


def test_features_match_direct_encoding(
    tmp_path: Path, slide_file: tuple[Path, list]
) -> None:
    path, _ = slide_file
    tile_slides([path], tmp_path, patch_size=256, level=1)
    coords_h5 = tmp_path / "patches" / "slide_a.h5"
    weights = _weights(tmp_path)
    out = tmp_path / "h5_files" / "slide_a.h5"
    n = extract_features(
        path,
        coords_h5,
        out,
        "small_cnn",
        weights,
        input_size=64,
        batch_size=5,
        params={"widths": [8, 16]},
        pt_path=tmp_path / "pt_files" / "slide_a.pt",
    )
    model = build_model(
        ModelConfig(weights=str(weights), params={"widths": [8, 16]}), 2
    ).eval()
    with h5py.File(out) as fh:
        feats, coords = fh["features"][:], fh["coords"][:]
        assert fh["coords"].attrs["patch_level"] == 1
        assert fh.attrs["encoder_sha256"] == state_digest(model.encoder)
    assert feats.shape == (n, model.feature_dim) and feats.dtype == np.float32
    with h5py.File(coords_h5) as fh:
        assert np.array_equal(coords, fh["coords"][:])
    with open_slide(path) as s, torch.no_grad():
        patches = np.stack([s.read_region(x, y, 1, 256, 256) for x, y in coords])
        x = torch.from_numpy(patches).permute(0, 3, 1, 2).float() / 255
        x = F.interpolate(x, size=(64, 64), mode="bilinear", antialias=True)
        direct = model.encode(x).numpy()
    np.testing.assert_allclose(feats, direct, rtol=1e-4, atol=1e-5)
    pt = torch.load(tmp_path / "pt_files" / "slide_a.pt")
    assert torch.equal(pt, torch.from_numpy(feats))


def test_feature_stage_resumes_and_counts_bad(
    tmp_path: Path, slide_file: tuple[Path, list]
) -> None:
    path, _ = slide_file
    tile_slides([path], tmp_path / "t", patch_size=256, level=2)
    other = tmp_path / "no_coords.tif"  # a readable slide that was never tiled
    other.write_bytes(path.read_bytes())
    kw = {"params": {"widths": [8]}, "input_size": 32, "save_pt": True}
    with pytest.raises(DataError, match=r"no_coords\.h5.*does not exist"):
        extract_features_stage([path, other], tmp_path / "t", tmp_path / "f", **kw)
    rep = extract_features_stage(
        [path, other], tmp_path / "t", tmp_path / "f", skip_bad=True, **kw
    )
    # slide_a was finished before the failure on the second slide
    assert rep.resumed == ["slide_a"] and not rep.done and len(rep.bad) == 1
    assert "no_coords" in rep.bad[0]
    assert (tmp_path / "f" / "pt_files" / "slide_a.pt").is_file()
    again = extract_features_stage([path], tmp_path / "t", tmp_path / "f", **kw)
    assert again.resumed == ["slide_a"] and not again.done


# ------------------------------------------------------------------ CLI


def parser() -> argparse.ArgumentParser:
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
    assert find_slides([slides]) == [slides / "slide_a.tif"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no slide files in"):
        find_slides([tmp_path / "empty"])
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
            parser().parse_args([cmd, "--help"])
        assert exc.value.code == 0
    bad = parser().parse_args(["tile", str(tmp_path / "nope.tif"), "-o", str(out)])
    with pytest.raises(DataError, match=r"nope\.tif"):
        wsi_cli.run(bad)
    assert main(["tile", str(tmp_path / "nope.tif"), "-o", str(out)]) == 2
    assert "nope.tif" in capsys.readouterr().err
