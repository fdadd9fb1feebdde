"""Predictions of a model file on a site's unlabelled files, one CSV row each.

``fedpath predict``: one row per image file for an image model
(:func:`predict_files`), one row per bag file for a MIL model
(:func:`predict_bags`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedpath.artifact import LoadedModel
from fedpath.data.base import DataError
from fedpath.inference.bags import BagReader
from fedpath.inference.images import Progress, image_batches
from fedpath.mil.bags import SlideBag
from fedpath.mil.export import BAG_SUFFIXES, LoadedMILModel, scan_bag_files
from fedpath.utils.io import atomic_write_text


def _write_csv(out: Path, header: Sequence[str], rows: list[list[str]]) -> None:
    """``header`` and ``rows`` as CSV to ``out``, atomically."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows(rows)
    atomic_write_text(out, buf.getvalue())


def predict_files(
    model: LoadedModel,
    target: Path,
    out: Path,
    batch_size: int = 64,
    skip_bad: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Write ``out`` (CSV: path, predicted, prob_<class>...) for every image:
    ``predicted`` by the model's operating point when it has one, else the argmax;
    the (temperature-scaled) probabilities."""
    rows: list[list[str]] = []
    skipped: list[str] = []
    for names, batch in image_batches(
        model, target, batch_size, skip_bad, skipped, progress
    ):
        probs = model.predict_proba(batch)
        decided = model.decide(probs)
        for name, p, c in zip(names, probs, decided, strict=True):
            rows.append([name, model.class_names[c], *(f"{v:.6f}" for v in p)])
    if not rows:
        raise DataError(f"every image under {str(target)!r} was unreadable")
    header = ["path", "predicted", *(f"prob_{c}" for c in model.class_names)]
    _write_csv(out, header, rows)
    return {"images": len(rows), "skipped": skipped}


def _bag_files(model: LoadedMILModel, target: Path) -> list[Path]:
    """The bag files of ``target``: itself, or those of the folder (at any
    depth; of a CLAM ``h5_files``/``pt_files`` pair only the ``.h5``)."""
    if not target.exists():
        raise DataError(f"{str(target)!r} does not exist")
    if target.is_file() and target.suffix not in BAG_SUFFIXES:
        raise DataError(
            f"{str(target)!r} is not a bag file ({', '.join(BAG_SUFFIXES)}); the "
            f"model {str(model.path)!r} is a MIL model of slide bags"
        )
    files = [target] if target.is_file() else scan_bag_files(target)
    if not files:
        raise DataError(
            f"no bag files ({', '.join(BAG_SUFFIXES)}) under {str(target)!r}"
        )
    return files


def predict_bags(
    model: LoadedMILModel,
    target: Path,
    out: Path,
    skip_bad: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Write ``out`` (CSV: slide, path, predicted, prob_<class>...) for every bag
    file (``.h5``, ``.pt``) of ``target`` (a bag file, or a folder searched at
    any depth; of a CLAM ``h5_files``/``pt_files`` pair only the ``.h5``):
    ``slide`` is the file's stem, ``predicted`` the argmax, the probabilities at
    full precision (``repr``: they read back as the same floats). A bag of
    another feature dimension than the model's is an error naming it."""
    files = _bag_files(model, target)
    reader = BagReader(model, skip_bad)
    rows: list[list[str]] = []
    for i, f in enumerate(files):
        read = reader.read(f)
        if read is not None:
            bag = SlideBag(f.stem, read[0], 0, "", read[1])
            probs = model.predict_proba([bag])
            c = int(model.decide(probs)[0])
            rows.append(
                [
                    f.stem,
                    str(f),
                    model.class_names[c],
                    *(repr(float(v)) for v in probs[0]),
                ]
            )
        if progress is not None:
            progress(i + 1, len(files))
    if not rows:
        raise DataError(f"every bag file under {str(target)!r} was unreadable")
    header = ["slide", "path", "predicted", *(f"prob_{c}" for c in model.class_names)]
    _write_csv(out, header, rows)
    return {"slides": len(rows), "skipped": reader.skipped, "warnings": reader.warnings}
