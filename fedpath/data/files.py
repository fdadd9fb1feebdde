"""Images read from files: a lazy store, decoding, and resizing like training does.

Every image fedpath reads from disk goes through :func:`load_image`: decoded with
PIL, converted to RGB, and resized to the dataset's ``image_size`` with antialiased
bilinear interpolation when its size differs (the way training resized it, so
evaluation and prediction at another hospital see the same geometry).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import stat
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from fedpath.data.base import DataError, ImageStore, TensorStore
from fedpath.data.inputs import list_folder
from fedpath.utils.files import check_file

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp")


def image_files(folder: Path, recursive: bool = False) -> list[Path]:
    """The regular files in ``folder`` with an image suffix (:data:`IMAGE_SUFFIXES`,
    any case), sorted; ``recursive``: of its subfolders too, at any depth
    (symlinked folders are not followed: no loops).

    A FIFO, socket or device named ``*.png`` is left out (reading it would block
    forever); a folder that cannot be read is a DataError naming it (its images
    would otherwise be left out without a word).
    """
    found: list[Path] = []
    pending = [folder]
    while pending:
        for entry in list_folder(pending.pop()):
            if entry.is_dir(follow_symlinks=False):
                if recursive:
                    pending.append(Path(entry.path))
            elif Path(entry.name).suffix.lower() in IMAGE_SUFFIXES and _listable(entry):
                found.append(Path(entry.path))
    return sorted(found)


def _listable(entry: os.DirEntry[str]) -> bool:
    """A regular file, or an entry that cannot be checked (a broken link): kept,
    so reading it names the problem instead of dropping the image unseen."""
    try:
        return stat.S_ISREG(entry.stat().st_mode)
    except OSError:
        return True


#: an image smaller than this, or more than 4x smaller than ``image_size``, is
#: refused rather than silently upscaled into a blur
MIN_SIDE = 8

#: the most pixels an image read here may declare (8192 x 8192): this path reads
#: crops and tiles whole into memory, so a header declaring more is refused before
#: decoding (a decompression bomb: a small PNG declaring 20000 x 20000 px would
#: take 1.2 GB). Whole-slide images are not read here but by
#: :mod:`fedpath.wsi.slide`, a tile at a time.
MAX_PIXELS = 8192 * 8192

_TIFF = (".tif", ".tiff")
_PIL_PIXELS = re.compile(r"\((\d+) pixels\)")


def load_image(path: Path, size: int, zoom: float = 1.0) -> np.ndarray:
    """uint8 (3, size, size) RGB array of the image at ``path`` (DataError if bad).

    ``zoom`` > 1 keeps the central 1/zoom of each side before resizing
    (:func:`centre_box`): for crops centred on an object, such as AMi-Br's
    mitotic figures, the network sees the object larger.

    16-bit images are scaled by their bit depth (not clipped to white); float
    images whose values lie in [0, 1] are scaled to 0-255, other float ranges
    are refused naming the range; transparency is composited on white (not
    turned black); an image whose shorter side is under :data:`MIN_SIDE` px or a
    quarter of ``size``, or that declares more than :data:`MAX_PIXELS`, is
    refused; only a regular file is opened (a FIFO would block forever).
    """
    check_file(path, "image file")
    try:
        rgb = _open_rgb(path, size)
        if zoom != 1.0:
            rgb = _zoomed(rgb, path, size, zoom)
        if rgb.size != (size, size):
            rgb = rgb.resize((size, size), Image.Resampling.BILINEAR, reducing_gap=None)
        arr = np.asarray(rgb, dtype=np.uint8)
    except DataError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        # PIL's own (higher) limit fired first: its message gives the pixel count
        m = _PIL_PIXELS.search(str(err))
        raise DataError(_too_large(path, m.group(1) + " px" if m else "")) from None
    except FileNotFoundError:
        raise DataError(f"image file {str(path)!r} does not exist") from None
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise DataError(f"cannot read image {str(path)!r}: {err}") from None
    return np.ascontiguousarray(arr.transpose(2, 0, 1))


def centre_box(wh: tuple[int, int], zoom: float) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of the central 1/``zoom`` of a ``wh`` image,
    at least one pixel a side, as even a margin as whole pixels allow."""
    w, h = wh
    cw, ch = max(1, round(w / zoom)), max(1, round(h / zoom))
    left, top = (w - cw) // 2, (h - ch) // 2
    return left, top, left + cw, top + ch


def _zoomed(rgb: Image.Image, path: Path, size: int, zoom: float) -> Image.Image:
    """The central 1/``zoom`` of ``rgb``, refused when it is too small to be
    resized to ``size`` (the rule :func:`_check_size` applies to whole images)."""
    box = centre_box(rgb.size, zoom)
    w, h = box[2] - box[0], box[3] - box[1]
    least = max(MIN_SIDE, math.ceil(size / 4))
    if min(w, h) < least:
        raise DataError(
            f"image {str(path)!r} is {rgb.size[0]}x{rgb.size[1]} px; its central "
            f"1/{zoom:g} (data.params.zoom) is {w}x{h} px, too small to be resized "
            f"to {size} px (at least {least} px a side); lower data.params.zoom "
            "or data.params.image_size"
        )
    return rgb.crop(box)


def _open_rgb(path: Path, size: int) -> Image.Image:
    """The image at ``path`` as an RGB PIL image (size checked before decoding);
    a TIFF PIL cannot read (float RGB, float64) is read with tifffile."""
    try:
        im = Image.open(path)
    except UnidentifiedImageError:
        if path.suffix.lower() not in _TIFF:
            raise
        return _tiff_rgb(path, size)
    with im:
        _check_size(path, im.size, size)
        return _to_rgb(im, path)


def _check_size(path: Path, wh: tuple[int, int], size: int) -> None:
    w, h = wh
    if w * h > MAX_PIXELS:
        raise DataError(_too_large(path, f"{w}x{h} px"))
    if min(w, h) < max(MIN_SIDE, size / 4):
        raise DataError(
            f"image {str(path)!r} is {w}x{h} px, too small to be resized to "
            f"{size} px (at least {max(MIN_SIDE, math.ceil(size / 4))} px a "
            "side); fix the file or lower data.params.image_size"
        )


def _too_large(path: Path, declared: str) -> str:
    return (
        f"image {str(path)!r} declares {declared or 'a size'} over fedpath's limit "
        f"of {MAX_PIXELS} px (8192x8192; fedpath.data.files.MAX_PIXELS), a possible "
        "decompression bomb; cut crops or tiles from it (whole slides: fedpath wsi)"
    )


def _tiff_rgb(path: Path, size: int) -> Image.Image:
    import tifffile

    try:
        with tifffile.TiffFile(path) as tif:
            series = tif.series[0]
            axes, shape = series.axes, tuple(int(n) for n in series.shape)
            # the size is checked before decoding; pages or planes beyond one
            # image (a stack) are refused, never read
            if axes not in ("YX", "YXS", "SYX") or (
                "S" in axes and shape[axes.index("S")] not in (1, 3, 4)
            ):
                raise DataError(
                    f"image {str(path)!r} has axes {axes} of shape {shape}; expected "
                    "one 2-D image of 1, 3 or 4 channels"
                )
            yx = [shape[axes.index(c)] for c in "YX"]
            _check_size(path, (yx[1], yx[0]), size)
            a = series.asarray()
    except DataError:
        raise
    except Exception as err:  # tifffile raises many types on garbage
        raise DataError(f"cannot read image {str(path)!r}: {err}") from None
    if axes == "SYX":
        a = np.moveaxis(a, 0, -1)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[..., 0]
    if a.ndim == 2:
        return Image.fromarray(_to_uint8(a, path), "L").convert("RGB")
    mode = "RGB" if a.shape[2] == 3 else "RGBA"
    return _to_rgb(Image.fromarray(_to_uint8(a, path), mode), path)


def _to_uint8(a: np.ndarray, path: Path) -> np.ndarray:
    """``a`` as uint8: 16-bit by its bit depth, wider integers by 65535 (or their
    maximum above it), float in [0, 1] times 255; other values refused."""
    if a.dtype == np.uint8:
        return a
    if a.dtype == np.bool_:
        return a.astype(np.uint8) * 255
    x = a.astype(np.float64)
    if a.dtype.kind == "f":
        if not np.isfinite(x).all():
            raise DataError(f"image {str(path)!r} holds NaN or infinite values")
        lo, hi = float(x.min()), float(x.max())
        if lo < 0.0 or hi > 1.0:
            raise DataError(
                f"image {str(path)!r} is a float image with values in "
                f"[{lo:g}, {hi:g}]; fedpath reads float images whose values lie in "
                "[0, 1] (scaled to 0-255): rescale it, or save it as 8- or 16-bit "
                "integers"
            )
        return np.rint(x * 255.0).astype(np.uint8)
    if x.min() < 0:
        raise DataError(
            f"image {str(path)!r} holds negative values (min {x.min():g}); expected "
            "unsigned 8- or 16-bit pixel values"
        )
    depth = 65535.0 if a.dtype == np.uint16 or x.max() <= 65535 else float(x.max())
    return np.clip(np.rint(x / depth * 255.0), 0, 255).astype(np.uint8)


def _to_rgb(im: Image.Image, path: Path) -> Image.Image:
    if im.mode.startswith("I") or im.mode == "F":
        a = np.asarray(im)
        if im.mode.startswith("I;16"):
            a = a.astype(np.uint16)  # scaled by its bit depth, not its maximum
        return Image.fromarray(_to_uint8(a, path), "L").convert("RGB")
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
        zoom: float = 1.0,
    ) -> None:
        self.paths = [Path(p) for p in paths]
        self.image_size = image_size
        self.zoom = zoom
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
                out[i] = load_image(self.paths[idx[i]], self.image_size, self.zoom)
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
        images are decoded at (and the zoom, when not 1): a changed, added or
        moved crop changes it."""
        zoom = f" zoom {self.zoom!r}" if self.zoom != 1.0 else ""
        h = hashlib.sha256(f"FileStore {self.image_size}{zoom}\n".encode())
        for p in self.paths:
            st = check_file(p, "image file")
            h.update(f"{p.resolve()}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
        return h.hexdigest()

    def to_memory(self) -> TensorStore:
        """Decode everything once into a :class:`TensorStore` (small datasets)."""
        return TensorStore(self.load(np.arange(len(self))))
