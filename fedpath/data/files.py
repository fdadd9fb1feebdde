"""Images read from files: a lazy store, decoding, and resizing like training does.

Every image fedpath reads from disk goes through :func:`load_image`: decoded with
PIL, converted to RGB, and resized to the dataset's ``image_size`` with antialiased
bilinear interpolation when its size differs (the way training resized it, so
evaluation and prediction at another hospital see the same geometry).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from fedpath.data.base import DataError, ImageStore, TensorStore

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp")


def image_files(folder: Path, recursive: bool = False) -> list[Path]:
    """The entries of ``folder`` with an image suffix (:data:`IMAGE_SUFFIXES`, any
    case), sorted; ``recursive``: of its subfolders too, at any depth."""
    entries = folder.rglob("*") if recursive else folder.iterdir()
    return sorted(p for p in entries if p.suffix.lower() in IMAGE_SUFFIXES)


#: an image smaller than this, or more than 4x smaller than ``image_size``, is
#: refused rather than silently upscaled into a blur
MIN_SIDE = 8


def load_image(path: Path, size: int) -> np.ndarray:
    """uint8 (3, size, size) RGB array of the image at ``path`` (DataError if bad).

    16-bit grayscale is scaled by its bit depth (not clipped to white);
    transparency is composited on white (not turned black); an image whose
    shorter side is under :data:`MIN_SIDE` px or a quarter of ``size`` is refused.
    """
    try:
        with Image.open(path) as im:
            w, h = im.size
            if min(w, h) < max(MIN_SIDE, size / 4):
                raise DataError(
                    f"image {str(path)!r} is {w}x{h} px, too small to be resized to "
                    f"{size} px (at least {max(MIN_SIDE, math.ceil(size / 4))} px a "
                    "side); fix the file or lower data.params.image_size"
                )
            rgb = _to_rgb(im)
            if rgb.size != (size, size):
                rgb = rgb.resize(
                    (size, size), Image.Resampling.BILINEAR, reducing_gap=None
                )
            arr = np.asarray(rgb, dtype=np.uint8)
    except FileNotFoundError:
        raise DataError(f"image file {str(path)!r} does not exist") from None
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise DataError(f"cannot read image {str(path)!r}: {err}") from None
    return np.ascontiguousarray(arr.transpose(2, 0, 1))


def _to_rgb(im: Image.Image) -> Image.Image:
    if im.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        a = np.asarray(im, dtype=np.float64)
        depth = 65535.0 if im.mode.startswith("I;16") or a.max() <= 65535 else a.max()
        gray = np.clip(np.rint(a / depth * 255.0), 0, 255).astype(np.uint8)
        return Image.fromarray(gray, "L").convert("RGB")
    if im.mode in ("RGBA", "LA", "PA") or (
        im.mode == "P" and "transparency" in im.info
    ):
        rgba = im.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return im.convert("RGB")


class FileStore(ImageStore):
    """Images decoded from files on demand, in threads (PIL releases the GIL)."""

    def __init__(
        self,
        paths: Sequence[Path],
        image_size: int,
        workers: int = 4,
        where: Sequence[str] | None = None,
    ) -> None:
        self.paths = [Path(p) for p in paths]
        self.image_size = image_size
        self.workers = workers
        #: where each image is listed (``manifest.csv:12``), named in errors
        self.where = list(where) if where is not None else None

    def __len__(self) -> int:
        return len(self.paths)

    def load(self, indices: np.ndarray) -> torch.Tensor:
        idx = np.asarray(indices, dtype=np.int64)
        out = np.empty((len(idx), 3, self.image_size, self.image_size), np.uint8)

        def one(i: int) -> None:
            try:
                out[i] = load_image(self.paths[idx[i]], self.image_size)
            except DataError as err:
                if self.where is None:
                    raise
                raise DataError(
                    f"{self.where[idx[i]]}: {err} (read during training; "
                    "data.params.skip_bad=true checks every image before the run)"
                ) from None

        if len(idx) <= 2 or self.workers <= 1:
            for i in range(len(idx)):
                one(i)
        else:
            with ThreadPoolExecutor(self.workers) as pool:
                list(pool.map(one, range(len(idx))))
        return torch.from_numpy(out)

    def fingerprint(self) -> str:
        """sha256 of every file's path, size and modification time, and the size
        images are decoded at: a changed, added or moved crop changes it."""
        h = hashlib.sha256(f"FileStore {self.image_size}\n".encode())
        for p in self.paths:
            try:
                st = p.stat()
            except FileNotFoundError:
                raise DataError(f"image file {str(p)!r} does not exist") from None
            h.update(f"{p.resolve()}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
        return h.hexdigest()

    def to_memory(self) -> TensorStore:
        """Decode everything once into a :class:`TensorStore` (small datasets)."""
        return TensorStore(self.load(np.arange(len(self))))
