"""Images read from files: a lazy store, decoding, and resizing like training does.

Every image fedpath reads from disk goes through :func:`load_image`: decoded with
PIL, converted to RGB, and resized to the dataset's ``image_size`` with antialiased
bilinear interpolation when its size differs (the way training resized it, so
evaluation and prediction at another hospital see the same geometry).
"""

from __future__ import annotations

import hashlib
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


def load_image(path: Path, size: int) -> np.ndarray:
    """uint8 (3, size, size) RGB array of the image at ``path`` (DataError if bad)."""
    try:
        with Image.open(path) as im:
            rgb = im.convert("RGB")
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


class FileStore(ImageStore):
    """Images decoded from files on demand, in threads (PIL releases the GIL)."""

    def __init__(
        self, paths: Sequence[Path], image_size: int, workers: int = 4
    ) -> None:
        self.paths = [Path(p) for p in paths]
        self.image_size = image_size
        self.workers = workers

    def __len__(self) -> int:
        return len(self.paths)

    def load(self, indices: np.ndarray) -> torch.Tensor:
        idx = np.asarray(indices, dtype=np.int64)
        out = np.empty((len(idx), 3, self.image_size, self.image_size), np.uint8)

        def one(i: int) -> None:
            out[i] = load_image(self.paths[idx[i]], self.image_size)

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
