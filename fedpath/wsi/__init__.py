"""Whole-slide images: lazy reading, tissue tiling, features, and the MvMidog builder.

The preprocessing stages of fedpath's slide pipeline (CLAM's stage scripts, Lu et
al. 2021), each a function and a ``fedpath`` subcommand (:mod:`fedpath.wsi.cli`):

* :func:`open_slide` (:mod:`.slide`): pyramidal TIFF via tifffile
  (:mod:`.slide_tiff`), other formats via OpenSlide (:mod:`.slide_openslide`);
  regions are decoded tile by tile, never a whole level (:mod:`.slide_base`).
* :func:`tile_slide` / :func:`tile_slides` (:mod:`.tiling`): tissue mask
  (:mod:`.tissue`), grid patches, ``patches/<slide_id>.h5`` (CLAM's coords layout).
* :func:`extract_features` / :func:`extract_features_stage` (:mod:`.features`):
  ``h5_files/<slide_id>.h5`` with ``features`` and ``coords`` (+ ``pt_files``).
* :func:`build_mvmidog` (:mod:`.midog`): the FedStain paper's MvMidog patches and
  manifest from MIDOG slides (settings :mod:`.midog_params`, annotation JSON
  :mod:`.midog_annotations`, one slide's crops :mod:`.midog_patches`, quality
  filter :mod:`.quality`).

Every stage writes through a temporary file and a rename (nothing half-written),
skips what a previous run finished, and with ``skip_bad`` counts and reports bad
slides instead of stopping. The shared machinery for that (:func:`run_stage`)
lives here; the public functions above are imported lazily, so
``import fedpath.wsi.slide`` stays light.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import import_module
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from fedpath.errors import DataError

if TYPE_CHECKING:  # h5py loads when a stage first writes, not at `fedpath --help`
    import h5py


@lru_cache(maxsize=1)
def _file_mode() -> int:
    """0o666 less the umask: mkstemp makes 0600 files, outputs are shared data.

    Read from /proc rather than with os.umask(), which would briefly change the
    process's umask under other threads.
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o644


_EXPORTS = {
    "Slide": "slide_base",
    "open_slide": "slide",
    "find_slides": "slide",
    "tissue_mask": "tissue",
    "TissueMap": "tissue",
    "tile_slide": "tiling",
    "tile_slides": "tiling",
    "extract_features": "features",
    "extract_features_stage": "features",
    "MvMidogParams": "midog",
    "QualityThresholds": "quality",
    "build_mvmidog": "midog",
}

__all__ = [
    "StageReport",
    "atomic_h5",
    "check_unique_names",
    "h5_complete",
    "run_stage",
    "stage_progress",
    "write_png",
    *_EXPORTS,
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"fedpath.wsi.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'fedpath.wsi' has no attribute {name!r}")


@contextmanager
def atomic_h5(path: Path) -> Iterator[h5py.File]:
    """An h5 file written under a temporary name and renamed when complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
    )
    os.close(fd)
    tmp = Path(tmp_name)
    import h5py

    try:
        with h5py.File(tmp, "w") as fh:
            yield fh
        with tmp.open("rb") as raw:
            os.fsync(raw.fileno())
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def h5_complete(path: Path, dataset: str) -> bool:
    """True if ``path`` is a readable h5 file holding ``dataset`` of its full size."""
    import h5py

    if not path.is_file():
        return False
    try:
        with h5py.File(path, "r") as fh:
            if dataset not in fh:
                return False
            n = fh.attrs.get("num_patches")
            return n is None or int(n) == fh[dataset].shape[0]
    except (OSError, KeyError, ValueError):
        return False


def write_png(path: Path, image: np.ndarray) -> None:
    """PNG via a temporary file and rename: a crash never leaves half a PNG.

    No fsync per file (it would cost milliseconds per patch); the slide's ledger,
    written last with fsync, is what marks the slide done, and resuming checks
    that every listed PNG is present and non-empty.
    """
    buf = BytesIO()
    # zlib level 1: lossless like any level, 2-3x faster to write than the default
    Image.fromarray(image).save(buf, format="PNG", compress_level=1)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(buf.getvalue())
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class StageReport:
    """What a resumable stage did: slides done now, found done, and bad ones."""

    done: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    patches: int = 0

    def summary(self, what: str) -> str:
        text = (
            f"{what}: {len(self.done)} slides processed, {len(self.resumed)} already "
            f"done (skipped), {len(self.bad)} unreadable (skipped), "
            f"{self.patches} patches"
        )
        if self.bad:
            text += "\n  " + "\n  ".join(self.bad)
        return text


@contextmanager
def stage_progress(
    description: str, total: int, quiet: bool
) -> Iterator[Callable[[str], None]]:
    """Progress over slides on stderr, yields ``advance(name)``: a bar on a
    terminal, throttled timestamped lines in a log, nothing when quiet."""
    if quiet:
        yield lambda name: None
        return
    from fedpath.utils.progress_display import job_progress

    with job_progress(description, "slides", total, quiet) as job:
        yield lambda name: job.advance(1, name)


def check_unique_names(paths: Sequence[Path]) -> None:
    """Outputs are named by slide id, so two slides must not share one."""
    seen: dict[str, Path] = {}
    for p in paths:
        if p.stem in seen:
            raise DataError(
                f"slides {str(seen[p.stem])!r} and {str(p)!r} share the id "
                f"{p.stem!r}; their outputs would overwrite each other"
            )
        seen[p.stem] = p


def run_stage(
    description: str,
    paths: Sequence[Path],
    finished: Callable[[Path], bool],
    process: Callable[[Path], int],
    *,
    skip_bad: bool,
    quiet: bool,
) -> StageReport:
    """Run a resumable per-slide stage: ``process`` every slide not ``finished``.

    ``process`` writes one slide's outputs and returns its number of patches. A
    :class:`DataError` it raises propagates, or with ``skip_bad`` is listed in
    the report's ``bad`` and the stage goes on with the next slide.
    """
    check_unique_names(paths)
    report = StageReport()
    with stage_progress(description, len(paths), quiet) as advance:
        for p in paths:
            if finished(p):
                report.resumed.append(p.stem)
            else:
                try:
                    report.patches += process(p)
                    report.done.append(p.stem)
                except DataError as err:
                    if not skip_bad:
                        raise
                    report.bad.append(str(err))
            advance(p.stem)
    return report
