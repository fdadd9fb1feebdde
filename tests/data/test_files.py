"""Image files as real users have them (fedpath.data.files): 16-bit and RGBA PNGs,
tiny images, a corrupt image met lazily."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fedpath.data.base import DataError
from fedpath.data.files import load_image
from fedpath.runtime.experiment import run_experiment
from tests.data.helpers import corrupt_one, small_manifest_config


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
