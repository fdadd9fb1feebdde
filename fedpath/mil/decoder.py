r"""FedHD's optional decoder: patch embeddings back to pseudo-patches, for looking.

FedHD (design section, "可视化分支") ends with an optional generator that maps
synthetic patch embeddings back to pixels so that a pathologist can inspect what a
client's synthetic slides encode; the paper trains a FastGAN generator locally on
``L_GAN + lambda_rec * L_rec`` over the client's (embedding, patch) pairs. This
module is the small, CPU-sized version of that branch:

- :class:`PatchDecoder`: a conditional generator ``g: R^D -> [0, 1]^{3 x H x W}``;
  the embedding is standardised (statistics of the training embeddings, stored in
  the module), an MLP maps it to a ``4 x 4`` feature map, and FastGAN-style
  up-blocks (nearest upsampling, 3x3 conv, GroupNorm, ReLU) double it
  until it covers ``H`` (FastGAN's blocks use BatchNorm and GLU; GroupNorm keeps
  the output independent of the batch); a final 3x3 conv and a sigmoid give RGB
  (resized with area interpolation when ``H`` is not ``4 * 2^k``).
- :func:`reconstruction_loss`: ``L_rec = |g(z) - x|_1 + |g(z) - x|_2^2``
  (per-pixel means). Training is :func:`fedpath.mil.decoder_train.train_decoder`
  (reconstruction only by default, which gives blurred, mean-like pseudo-patches;
  with ``adversarial=AdversarialOptions(...)`` the paper's ``L_GAN + lambda_rec *
  L_rec`` against a small spectrally normalised hinge-loss discriminator,
  :mod:`fedpath.mil.decoder_gan`, a CPU-sized reduction of FastGAN's, which
  sharpens textures). The layers: this module, then ``decoder_gan``, then
  ``decoder_train``, each importing only those before it.
- :func:`render` and :func:`save_grid`: uint8 pseudo-patches and a PNG with the
  rows "real patches", "decoded real embeddings", "decoded synthetic-slide tokens".

The pictures are for visual inspection only: the paper itself notes (limitations)
that the pseudo-patches' fidelity has not been assessed by pathologists.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: Side of the first feature map of the generator.
BASE = 4
#: Grid layout of :func:`save_grid`, in pixels.
GRID_PAD = 4
GRID_LABEL = 16
#: Row titles of :func:`save_grid`.
ROW_TITLES = (
    "real patches",
    "decoded real embeddings",
    "decoded synthetic-slide tokens",
)


class PatchDecoder(nn.Module):
    """Conditional generator from a ``D``-dim embedding to an ``H x H`` RGB patch.

    Parameters
    ----------
    embed_dim : int
        ``D``, the dimension of the embeddings it decodes.
    image_size : int
        ``H`` (>= 4): side of the square patches it produces.
    width : int
        Channels of the first feature map; each up-block halves them (>= 16).
    """

    def __init__(self, embed_dim: int, image_size: int, width: int = 64) -> None:
        super().__init__()
        if embed_dim < 1 or image_size < BASE or width < 1:
            raise ValueError(
                f"need embed_dim >= 1, image_size >= {BASE}, width >= 1; got "
                f"{embed_dim}, {image_size}, {width}"
            )
        self.embed_dim = embed_dim
        self.image_size = image_size
        self.width = width
        ups = max(0, math.ceil(math.log2(image_size / BASE)))
        self.in_mean: Tensor
        self.in_std: Tensor
        self.register_buffer("in_mean", torch.zeros(embed_dim))
        self.register_buffer("in_std", torch.ones(embed_dim))
        hidden = max(128, width * 2)
        self.mlp = nn.Sequential(
            nn.Linear(embed_dim, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, width * BASE * BASE),
            nn.ReLU(inplace=True),
        )
        blocks: list[nn.Module] = []
        c = width
        for _ in range(ups):
            c_out = max(16, c // 2)
            blocks += [
                nn.Upsample(scale_factor=2, mode="nearest"),
                nn.Conv2d(c, c_out, 3, padding=1, bias=False),
                nn.GroupNorm(min(8, c_out), c_out),
                nn.ReLU(inplace=True),
            ]
            c = c_out
        self.up = nn.Sequential(*blocks)
        self.to_rgb = nn.Conv2d(c, 3, 3, padding=1)

    def set_input_stats(self, embeddings: Tensor) -> None:
        """Standardise inputs with the mean and std of ``embeddings`` (N, D)."""
        x = embeddings.detach().to(self.in_mean)
        self.in_mean.copy_(x.mean(0))
        self.in_std.copy_(x.std(0, unbiased=False).clamp_min(1e-6))

    def forward(self, z: Tensor) -> Tensor:
        """Pseudo-patches ``(B, 3, H, H)`` in ``[0, 1]`` of embeddings ``(B, D)``."""
        h = self.mlp((z - self.in_mean) / self.in_std)
        h = self.up(h.view(-1, self.width, BASE, BASE))
        x = torch.sigmoid(self.to_rgb(h))
        if x.shape[-1] != self.image_size:
            x = F.interpolate(x, size=(self.image_size,) * 2, mode="area")
        return x


def check_embeddings(embeddings: Tensor, name: str = "embeddings") -> Tensor:
    """``embeddings`` as float32, or a ValueError naming ``name``: not (N > 0,
    D) float, or not finite."""
    if not isinstance(embeddings, Tensor) or embeddings.ndim != 2:
        got = tuple(embeddings.shape) if isinstance(embeddings, Tensor) else embeddings
        raise ValueError(f"{name}: expected an (N, D) float tensor, got {got!r}")
    if not embeddings.is_floating_point():
        raise ValueError(f"{name}: expected a float tensor, got {embeddings.dtype}")
    if embeddings.shape[0] == 0:
        raise ValueError(f"{name}: no rows (N = 0)")
    if not bool(torch.isfinite(embeddings).all()):
        raise ValueError(f"{name}: contains NaN or inf")
    return embeddings.float()


def check_patches(patches: Tensor, name: str = "patches") -> Tensor:
    """``patches``, or a ValueError naming ``name``: not uint8 (N > 0, 3, H, H)."""
    if not isinstance(patches, Tensor) or patches.dtype != torch.uint8:
        got = patches.dtype if isinstance(patches, Tensor) else type(patches).__name__
        raise ValueError(f"{name}: expected a uint8 tensor (N, 3, H, W), got {got}")
    if patches.ndim != 4 or patches.shape[1] != 3 or patches.shape[0] == 0:
        raise ValueError(
            f"{name}: expected shape (N > 0, 3, H, W), got {tuple(patches.shape)}"
        )
    if patches.shape[2] != patches.shape[3]:
        raise ValueError(f"{name}: patches must be square, got {patches.shape[2:]}")
    return patches


def check_dim(decoder: PatchDecoder, embeddings: Tensor) -> None:
    """A ValueError unless ``embeddings`` have the decoder's dimension."""
    if embeddings.shape[1] != decoder.embed_dim:
        raise ValueError(
            f"embeddings: D = {embeddings.shape[1]}, but the decoder was trained "
            f"on D = {decoder.embed_dim} (embeddings from another extractor?)"
        )


def reconstruction_loss(pred: Tensor, target: Tensor) -> Tensor:
    """``L_rec``: per-pixel mean absolute plus mean squared error, images in [0, 1]."""
    return F.l1_loss(pred, target) + F.mse_loss(pred, target)


@torch.no_grad()
def render(decoder: PatchDecoder, embeddings: Tensor, batch_size: int = 256) -> Tensor:
    """Pseudo-patches ``(N, 3, H, H)`` uint8 of embeddings ``(N, D)``.

    Raises
    ------
    ValueError
        When ``embeddings`` is not (N, D) float or its D differs from the
        decoder's.
    """
    z = check_embeddings(embeddings)
    check_dim(decoder, z)
    decoder.eval()
    chunks = [
        decoder(z[i : i + batch_size]).mul(255.0).round().clamp(0, 255).to(torch.uint8)
        for i in range(0, z.shape[0], batch_size)
    ]
    return torch.cat(chunks)


@torch.no_grad()
def reconstruction_error(
    decoder: PatchDecoder, embeddings: Tensor, patches: Tensor
) -> float:
    """Mean ``L_rec`` of ``decoder`` on (embedding, patch) pairs."""
    z, x8 = check_embeddings(embeddings), check_patches(patches)
    check_dim(decoder, z)
    if z.shape[0] != x8.shape[0]:
        raise ValueError(
            f"embeddings has N = {z.shape[0]} rows but patches has N = {x8.shape[0]}"
        )
    decoder.eval()
    return float(reconstruction_loss(decoder(z), x8.float() / 255.0))


def grid_zoom(image_size: int, min_cell: int = 64) -> int:
    """Integer upscaling of a patch in :func:`save_grid` (cells >= ``min_cell`` px)."""
    return max(1, math.ceil(min_cell / image_size))


def grid_shape(columns: int, image_size: int, rows: int = 3) -> tuple[int, int]:
    """``(width, height)`` in pixels of a :func:`save_grid` figure."""
    cell = image_size * grid_zoom(image_size)
    width = columns * cell + (columns + 1) * GRID_PAD
    return width, rows * (GRID_LABEL + cell + GRID_PAD) + GRID_PAD


def save_grid(
    real: Tensor,
    pseudo_real: Tensor,
    pseudo_synthetic: Tensor,
    path: str | Path,
    columns: int | None = None,
) -> Path:
    """Write a PNG with three titled rows of patches (see :data:`ROW_TITLES`).

    Rows: ``real`` patches, ``pseudo_real`` (the decoder's output for the real
    patches' embeddings, column-aligned with ``real``) and ``pseudo_synthetic``
    (decoded tokens of a distilled synthetic slide). All are uint8 ``(N, 3, H, H)``
    with one ``H``; each row shows its first ``columns`` patches (default: the
    longest row), upscaled by :func:`grid_zoom`. The figure measures
    :func:`grid_shape`; it is written to a temporary file and renamed.
    """
    from PIL import Image, ImageDraw

    rows = [
        check_patches(real, "real"),
        check_patches(pseudo_real, "pseudo_real"),
        check_patches(pseudo_synthetic, "pseudo_synthetic"),
    ]
    size = int(rows[0].shape[2])
    for name, r in zip(("pseudo_real", "pseudo_synthetic"), rows[1:], strict=True):
        if r.shape[2] != size:
            raise ValueError(
                f"{name}: patches are {r.shape[2]} px, the real ones {size} px"
            )
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path: expected a .png file, got {str(path)!r}")
    cols = columns if columns is not None else max(int(r.shape[0]) for r in rows)
    if cols < 1:
        raise ValueError(f"columns: expected >= 1, got {cols}")
    zoom = grid_zoom(size)
    cell = size * zoom
    width, height = grid_shape(cols, size)
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    for ri, (title, r) in enumerate(zip(ROW_TITLES, rows, strict=True)):
        top = GRID_PAD + ri * (GRID_LABEL + cell + GRID_PAD)
        draw.text((GRID_PAD, top + 2), title, fill="black")
        for ci in range(min(cols, int(r.shape[0]))):
            arr = r[ci].permute(1, 2, 0).contiguous().numpy()
            tile = Image.fromarray(arr, "RGB").resize(
                (cell, cell), Image.Resampling.NEAREST
            )
            canvas.paste(tile, (GRID_PAD + ci * (cell + GRID_PAD), top + GRID_LABEL))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        canvas.save(tmp, format="PNG", optimize=True)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def spread(n: int, k: int) -> list[int]:
    """``min(n, k)`` indices spread evenly over ``range(n)`` (first and last kept)."""
    if n <= k:
        return list(range(n))
    if k == 1:
        return [0]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


__all__ = [
    "PatchDecoder",
    "reconstruction_error",
    "reconstruction_loss",
    "render",
    "save_grid",
    "spread",
]
