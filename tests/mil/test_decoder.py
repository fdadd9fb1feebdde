"""FedHD's optional decoder branch: training, rendering, the grid and the command."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch
from PIL import Image

from fedpath.config import ConfigError
from fedpath.data.base import DataError
from fedpath.mil.decoder import (
    ROW_TITLES,
    PatchDecoder,
    grid_shape,
    reconstruction_error,
    render,
    save_grid,
    spread,
    train_decoder,
)
from fedpath.mil.render_cli import register


def pairs(
    n: int = 48, dim: int = 8, size: int = 16
) -> tuple[torch.Tensor, torch.Tensor]:
    """Patches whose colour and brightness are a linear function of the embedding."""
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(n, dim, generator=gen)
    colour = torch.sigmoid(z[:, :3])[:, :, None, None]
    ramp = torch.linspace(0.5, 1.0, size)[None, None, None, :]
    x = (colour * ramp).expand(n, 3, size, size) * 255
    return z, x.round().to(torch.uint8)


def test_training_reduces_reconstruction_loss() -> None:
    z, x = pairs()
    untrained, _ = train_decoder(z, x, epochs=0, seed=0, width=16)
    dec, hist = train_decoder(z, x, epochs=12, lr=5e-3, seed=0, batch_size=16, width=16)
    assert len(hist) == 12 and hist[-1] < hist[0]
    assert reconstruction_error(dec, z, x) < 0.6 * reconstruction_error(untrained, z, x)


def test_render_shape_dtype_range_and_odd_size() -> None:
    z, x = pairs(n=10, size=16)
    dec, _ = train_decoder(z, x, epochs=1, seed=0, width=16)
    out = render(dec, z)
    assert out.dtype == torch.uint8 and out.shape == (10, 3, 16, 16)
    assert int(out.min()) >= 0 and int(out.max()) <= 255
    # sizes that are not 4 * 2^k are resized to the patch size
    odd = PatchDecoder(8, 24, width=16).eval()
    assert render(odd, z).shape == (10, 3, 24, 24)


def test_deterministic_in_seed_and_global_rng_untouched() -> None:
    z, x = pairs(n=20)
    state = torch.random.get_rng_state()
    a, ha = train_decoder(z, x, epochs=2, seed=3, batch_size=8, width=16)
    assert torch.equal(torch.random.get_rng_state(), state)
    b, hb = train_decoder(z, x, epochs=2, seed=3, batch_size=8, width=16)
    c, _ = train_decoder(z, x, epochs=2, seed=4, batch_size=8, width=16)
    assert ha == hb
    assert torch.equal(render(a, z), render(b, z))
    assert not torch.equal(render(a, z), render(c, z))


def test_bad_inputs_name_the_argument() -> None:
    z, x = pairs(n=10)
    with pytest.raises(ValueError, match="N = 9"):
        train_decoder(z[:9], x, epochs=1)
    with pytest.raises(ValueError, match="patches: expected a uint8"):
        train_decoder(z, x.float(), epochs=1)
    with pytest.raises(ValueError, match="patches: expected shape"):
        train_decoder(z, x[:, :1], epochs=1)
    with pytest.raises(ValueError, match="embeddings: expected an"):
        train_decoder(z[0], x, epochs=1)
    with pytest.raises(ValueError, match="embeddings: contains NaN"):
        train_decoder(torch.full_like(z, float("nan")), x, epochs=1)
    with pytest.raises(ValueError, match="epochs"):
        train_decoder(z, x, epochs=-1)
    dec, _ = train_decoder(z, x, epochs=0, width=16)
    with pytest.raises(ValueError, match="D = 5.*D = 8"):
        render(dec, torch.zeros(3, 5))
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


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["fedhd-render", *argv])


TINY = [
    "data.params.num_hospitals=2",
    "data.params.samples_per_hospital=40",
    "data.params.image_size=16",
    "data.params.slides_per_hospital=2",
    "model.params.widths=[8,16]",
    "train.batch_size=16",
    "runtime.threads=null",
]


def test_cli_handler_writes_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "render.png"
    args = parse(
        "--out", str(out), "--domain", "hospital_1", "--train-epochs", "1",
        "--components", "2", "--tokens", "6", "--iters", "5",
        "--decoder-epochs", "2", "--decoder-width", "16", "--columns", "4", "-q",
        *TINY,
    )  # fmt: skip
    assert args.fedhd_render_handler(args) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    with Image.open(out) as im:
        assert im.size == grid_shape(4, 16)


def test_cli_bad_input(tmp_path: Path) -> None:
    png = str(tmp_path / "x.png")
    args = parse("--out", png, "--domain", "nowhere", "-q", *TINY)
    with pytest.raises(DataError, match="nowhere"):
        args.fedhd_render_handler(args)
    args = parse("--out", str(tmp_path / "x.jpg"), "-q", *TINY)
    with pytest.raises(ConfigError, match="--out"):
        args.fedhd_render_handler(args)
    args = parse("--out", png, "--slide", "slide99", "--train-epochs", "0", "-q", *TINY)
    with pytest.raises(DataError, match="slide99"):
        args.fedhd_render_handler(args)
    assert not (tmp_path / "x.png").exists()
