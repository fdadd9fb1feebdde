"""FedHD's optional decoder branch: the generator, rendering and the grid
(training: test_decoder_train.py; the adversary: test_decoder_gan.py; the
command: test_render_run.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from fedpath.mil.decoder import (
    ROW_TITLES,
    PatchDecoder,
    check_embeddings,
    grid_shape,
    reconstruction_error,
    render,
    save_grid,
    spread,
)
from fedpath.mil.decoder_train import train_decoder
from tests.mil_helpers import pairs


def test_render_shape_dtype_range_and_odd_size() -> None:
    z, x = pairs(n=10, size=16)
    dec, _ = train_decoder(z, x, epochs=1, seed=0, width=16)
    out = render(dec, z)
    assert out.dtype == torch.uint8 and out.shape == (10, 3, 16, 16)
    assert int(out.min()) >= 0 and int(out.max()) <= 255
    # sizes that are not 4 * 2^k are resized to the patch size
    odd = PatchDecoder(8, 24, width=16).eval()
    assert render(odd, z).shape == (10, 3, 24, 24)


def test_render_and_grid_refuse_bad_inputs_naming_them() -> None:
    z, x = pairs(n=10)
    dec = PatchDecoder(8, 16, width=16)
    with pytest.raises(ValueError, match="D = 5.*D = 8"):
        render(dec, torch.zeros(3, 5))
    with pytest.raises(ValueError, match="D = 5.*D = 8"):
        reconstruction_error(dec, torch.zeros(10, 5), x)
    with pytest.raises(ValueError, match="rows: expected an"):
        check_embeddings(z[0], "rows")
    with pytest.raises(ValueError, match="pseudo_synthetic"):
        save_grid(x, x, x.float(), Path("never.png"))
    with pytest.raises(ValueError, match="path: expected a .png"):
        save_grid(x, x, x, Path("grid.jpg"))


def test_grid_png_has_expected_size(tmp_path: Path) -> None:
    _, x = pairs(n=6, size=16)
    out = save_grid(x, x[:4], x[:5], tmp_path / "sub" / "grid.png", columns=5)
    with Image.open(out) as im:
        assert im.format == "PNG" and im.mode == "RGB"
        assert im.size == grid_shape(5, 16)
    assert grid_shape(5, 16)[1] > 3 * 64 and len(ROW_TITLES) == 3
    assert not list((tmp_path / "sub").glob("*.tmp"))
    assert spread(10, 3) == [0, 4, 9] and spread(2, 5) == [0, 1]
