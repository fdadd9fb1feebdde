"""Finding and opening whole slides: pyramidal TIFF via tifffile, others via OpenSlide.

:func:`open_slide` picks the backend (:class:`~.slide_tiff.TiffSlide` or
:class:`~.slide_openslide.OpenSlideSlide`) and returns a lazy :class:`Slide`
(:mod:`.slide_base`): it never holds a whole level in memory, and reads follow
OpenSlide's coordinates. :func:`find_slides` lists the slide files of folders.

Every failure (missing, unreadable or corrupt file, a region outside the slide)
raises :class:`~fedpath.data.base.DataError` naming the slide.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path

from fedpath.data.base import DataError
from fedpath.data.inputs import list_folder
from fedpath.utils.files import check_file
from fedpath.wsi.slide_base import Slide
from fedpath.wsi.slide_openslide import OpenSlideSlide, openslide_available
from fedpath.wsi.slide_tiff import TiffSlide

__all__ = ["SLIDE_SUFFIXES", "Slide", "find_slides", "open_slide"]

#: File suffixes treated as slides when a directory is given.
SLIDE_SUFFIXES = (
    ".tif",
    ".tiff",
    ".btf",
    ".svs",
    ".ndpi",
    ".mrxs",
    ".scn",
    ".vms",
    ".vmu",
    ".bif",
    ".svslide",
)
_TIFF_SUFFIXES = (".tif", ".tiff", ".btf")


def find_slides(inputs: Sequence[str | Path]) -> list[Path]:
    """Slide files of ``inputs``: files as given, directories searched (sorted).

    A directory contributes its files (not recursively) whose suffix is one of
    :data:`SLIDE_SUFFIXES`; a missing input is a :class:`DataError`.
    """
    found: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            # regular files only: a FIFO named *.svs would block the reader
            found.extend(
                sorted(
                    Path(e.path)
                    for e in list_folder(p, "slide folder")
                    if Path(e.name).suffix.lower() in SLIDE_SUFFIXES
                    and _regular(e.path)
                )
            )
        elif p.exists():
            found.append(p)
        else:
            raise DataError(f"slide {str(p)!r} does not exist")
    if not found:
        raise DataError(
            f"no slide files in {', '.join(map(str, inputs))}; expected files "
            f"ending in {', '.join(SLIDE_SUFFIXES)}"
        )
    return found


def open_slide(path: str | Path, backend: str = "auto") -> Slide:
    """Open a whole-slide image lazily.

    Parameters
    ----------
    path : str or Path
        The slide file.
    backend : {"auto", "tifffile", "openslide"}
        ``auto`` reads TIFF files with tifffile (falling back to OpenSlide if
        tifffile cannot) and every other format with OpenSlide.

    Raises
    ------
    DataError
        The file is missing, unreadable or corrupt (the message names it).
    """
    p = Path(path)
    check_file(p, "slide")
    if backend not in ("auto", "tifffile", "openslide"):
        raise DataError(
            f"slide backend must be auto, tifffile or openslide, got {backend!r}"
        )
    order: list[str]
    if backend != "auto":
        order = [backend]
    elif p.suffix.lower() in _TIFF_SUFFIXES:
        order = ["tifffile", "openslide"]
    else:
        order = ["openslide", "tifffile"]
    if not openslide_available():
        if backend == "openslide":
            raise DataError(
                f"slide {str(p)!r}: the openslide backend needs openslide-python "
                "and openslide-bin (pip install openslide-python openslide-bin)"
            )
        order = [b for b in order if b != "openslide"]
    errors = []
    for name in order:
        try:
            return TiffSlide(p) if name == "tifffile" else OpenSlideSlide(p)
        except DataError:
            raise
        except Exception as err:  # each library has its own error types
            errors.append(f"{name}: {type(err).__name__}: {_no_bytes(str(err))}")
    raise DataError(
        f"cannot read slide {str(p)!r} (corrupt or unsupported format): "
        + "; ".join(errors)
    )


def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


_BYTES = re.compile(r"""b(['"]).*?(?<!\\)\1""")


def _no_bytes(message: str) -> str:
    """A library's message without the bytes it quotes from the file (tifffile:
    ``header=b'root'``): an error may travel from a node to the coordinator."""
    return _BYTES.sub("<bytes>", message)
