"""Image files as real users have them (fedpath.data.files): 16-bit and RGBA PNGs,
float TIFFs, tiny images, decompression bombs, FIFOs, unreadable folders, a
corrupt image met lazily."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fedpath.data.base import DataError
from fedpath.data.files import MAX_PIXELS, centre_box, image_files, load_image
from fedpath.runtime.experiment import load_dataset, run_experiment
from tests.data.helpers import corrupt_one, png_header_only, small_manifest_config
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


def test_a_corrupt_image_met_lazily_names_its_manifest_row(tmp_path: Path) -> None:
    where = corrupt_one(tmp_path)
    over = [
        "data.params.in_memory=false",
        f"output_dir={tmp_path / 'runs'}",
        "train.rounds=1",
        "model.params.widths=[8]",
        "lodo.targets=[site2]",
    ]
    with pytest.raises(DataError, match=rf"{where}: cannot read image .*skip_bad"):
        run_experiment(small_manifest_config(tmp_path, *over))


def test_float_tiffs_in_0_1_are_scaled_not_black(tmp_path: Path) -> None:
    import tifffile

    tifffile.imwrite(tmp_path / "g.tif", np.full((20, 20), 0.5, np.float32))
    rgb = np.zeros((20, 20, 3), np.float32)
    rgb[..., 0] = 1.0  # pure red, as float in [0, 1]
    tifffile.imwrite(tmp_path / "rgb.tif", rgb, photometric="rgb")  # PIL can't
    assert (load_image(tmp_path / "g.tif", 20) == 128).all()
    red = load_image(tmp_path / "rgb.tif", 20)
    assert (red[0] == 255).all() and (red[1:] == 0).all()
    planar = np.moveaxis(rgb, -1, 0)  # (3, H, W): one plane per channel
    tifffile.imwrite(
        tmp_path / "p.tif", planar, photometric="rgb", planarconfig="separate"
    )
    assert np.array_equal(load_image(tmp_path / "p.tif", 20), red)
    stack = np.zeros((2, 20, 20, 3), np.float32)  # two images in one file
    tifffile.imwrite(tmp_path / "stack.tif", stack, photometric="rgb")
    with pytest.raises(DataError, match=r"stack.tif' has axes .* one 2-D image"):
        load_image(tmp_path / "stack.tif", 20)


def test_other_float_ranges_and_nan_are_refused_naming_the_range(
    tmp_path: Path,
) -> None:
    import tifffile

    tifffile.imwrite(tmp_path / "hu.tif", np.linspace(-2, 300, 400).reshape(20, 20))
    with pytest.raises(DataError, match=r"hu.tif' is a float image with values in"):
        load_image(tmp_path / "hu.tif", 20)
    tifffile.imwrite(tmp_path / "nan.tif", np.full((20, 20), np.nan, np.float32))
    with pytest.raises(DataError, match=r"nan.tif' holds NaN or infinite values"):
        load_image(tmp_path / "nan.tif", 20)


def test_16_bit_rgb_and_signed_images(tmp_path: Path) -> None:
    import tifffile

    rgb = np.full((20, 20, 3), 65535, np.uint16)
    rgb[..., 2] = 0
    tifffile.imwrite(tmp_path / "rgb16.tif", rgb, photometric="rgb")
    out = load_image(tmp_path / "rgb16.tif", 20)
    assert (out[:2] == 255).all() and (out[2] == 0).all()
    tifffile.imwrite(tmp_path / "s16.tif", np.full((20, 20), -5, np.int16))
    with pytest.raises(DataError, match=r"s16.tif' holds negative values"):
        load_image(tmp_path / "s16.tif", 20)


@pytest.mark.parametrize(
    ("side", "declared"), [(20000, "400000000 px"), (9000, "9000x9000 px")]
)
def test_a_decompression_bomb_is_a_data_error_naming_its_size(
    tmp_path: Path, side: int, declared: str
) -> None:
    assert side * side > MAX_PIXELS
    (tmp_path / "bomb.png").write_bytes(png_header_only(side, side))
    with pytest.raises(DataError, match=rf"bomb.png' declares {declared} over"):
        load_image(tmp_path / "bomb.png", 32)


def test_a_decompression_bomb_in_training_is_skipped_with_skip_bad(
    tmp_path: Path,
) -> None:
    path = write_manifest_tree(tmp_path)
    with path.open("a") as fh:
        fh.write("bomb.png,normal,site0,s9\n")
    (tmp_path / "bomb.png").write_bytes(png_header_only(20000, 20000))
    with pytest.raises(DataError, match=r"manifest.csv:50: image .*bomb.png' decl"):
        load_dataset(small_manifest_config(tmp_path).data)
    ds = load_dataset(small_manifest_config(tmp_path, "data.params.skip_bad=true").data)
    assert len(ds.skipped) == 1 and "declares 400000000 px" in ds.skipped[0]


def test_a_fifo_named_png_is_not_listed_and_refused_when_named(tmp_path: Path) -> None:
    Image.new("RGB", (16, 16)).save(tmp_path / "a.png")
    os.mkfifo(tmp_path / "b.png")  # opening it would block forever
    (tmp_path / "c.png").mkdir()  # a folder with an image's name
    assert image_files(tmp_path) == [tmp_path / "a.png"]
    assert image_files(tmp_path, recursive=True) == [tmp_path / "a.png"]
    with pytest.raises(DataError, match=r"b.png' is not a regular file \(a FIFO\)"):
        load_image(tmp_path / "b.png", 16)
    with pytest.raises(DataError, match=r"c.png' is a folder"):
        load_image(tmp_path / "c.png", 16)
    with pytest.raises(DataError, match=r"b.png': expected a folder, found a FIFO"):
        image_files(tmp_path / "b.png")  # predict given the FIFO itself


def test_an_unreadable_subfolder_is_an_error_not_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    Image.new("RGB", (16, 16)).save(tmp_path / "a.png")
    Image.new("RGB", (16, 16)).save(tmp_path / "sub" / "b.png")
    assert len(image_files(tmp_path, recursive=True)) == 2
    scandir = os.scandir

    def deny(path: os.PathLike[str]) -> object:
        if Path(path).name == "sub":
            raise PermissionError(13, "Permission denied")
        return scandir(path)

    monkeypatch.setattr(os, "scandir", deny)
    with pytest.raises(DataError, match=r"'.*/sub' cannot be read: permission denied"):
        image_files(tmp_path, recursive=True)


def test_zoom_keeps_the_central_part_before_resizing(tmp_path: Path) -> None:
    # a 40 px image: a 20 px red square in the middle of a blue frame
    a = np.zeros((40, 40, 3), np.uint8)
    a[..., 2] = 255
    a[10:30, 10:30] = (255, 0, 0)
    Image.fromarray(a).save(tmp_path / "c.png")
    whole = load_image(tmp_path / "c.png", 40)
    zoomed = load_image(tmp_path / "c.png", 40, zoom=2.0)
    assert (whole[:, 0, 0] == (0, 0, 255)).all()
    assert (zoomed[0] == 255).all() and (zoomed[1:] == 0).all()  # all red
    np.testing.assert_array_equal(load_image(tmp_path / "c.png", 20, zoom=2.0)[0], 255)
    assert centre_box((40, 40), 2.0) == (10, 10, 30, 30)
    assert centre_box((41, 30), 3.0) == (13, 10, 27, 20)  # margins 13 | 14
    with pytest.raises(DataError, match=r"central 1/4 \(data.params.zoom\) is 10x10"):
        load_image(tmp_path / "c.png", 64, zoom=4.0)  # 10 px < 64 / 4


def test_zoom_changes_the_datasets_images_and_lazy_fingerprint(tmp_path: Path) -> None:
    write_manifest_tree(tmp_path)
    lazy = "data.params.in_memory=false"
    plain = load_dataset(small_manifest_config(tmp_path, lazy).data)
    zoom = load_dataset(
        small_manifest_config(tmp_path, lazy, "data.params.zoom=2").data
    )
    assert plain.store.fingerprint() != zoom.store.fingerprint()
    first = np.arange(1)
    assert plain.store.load(first).shape == zoom.store.load(first).shape
    assert not torch.equal(plain.store.load(first), zoom.store.load(first))
    eager = load_dataset(small_manifest_config(tmp_path, "data.params.zoom=2").data)
    assert torch.equal(eager.store.load(first), zoom.store.load(first))
