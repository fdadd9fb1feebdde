"""Use an exported model at a hospital that never took part: evaluate and predict.

``evaluate``: any dataset fedpath can read (a manifest CSV, a folder per class, a
folder per domain and class, or a registered dataset and domain), metrics overall
and per domain. ``predict``: one CSV row per image file. Images are resized exactly
as the training data was (:func:`fedpath.data.files.load_image`). A model file's
temperature scales every probability, and its operating point (a threshold on the
positive class) makes the predictions and an ``operating_point`` block of metrics.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedpath.artifact import LoadedModel
from fedpath.config import load_config
from fedpath.data.base import DataError, DomainDataset, Split
from fedpath.data.files import IMAGE_SUFFIXES, image_files, load_image
from fedpath.data.manifest import (
    FileDatasetParams,
    Records,
    add_class_folders,
    build_file_dataset,
    read_manifest,
    scan_folders,
)
from fedpath.evaluation.calibration import threshold_metrics
from fedpath.evaluation.metrics import confusion_matrix, metrics_with_confusion
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks.images import predict_probs
from fedpath.utils.io import atomic_write_text

Progress = Callable[[int, int], None]


def scan_class_folders(root: Path) -> Records:
    """``root/<class>/<image>`` (images at any depth below a class folder): one
    domain named after ``root``."""
    rec = Records([], [], [], [], [])
    add_class_folders(rec, root, root.name, recursive=True)
    if not rec.paths:
        raise DataError(
            f"no images under {str(root)!r}; expected <class>/<image> folders "
            f"({', '.join(IMAGE_SUFFIXES)})"
        )
    return rec


def open_data(
    spec: str,
    model: LoadedModel,
    config: Path | None = None,
    overrides: Sequence[str] = (),
    skip_bad: bool = False,
) -> tuple[DomainDataset, list[str] | None]:
    """The dataset named by ``spec`` at the model's input size, and its domains.

    ``spec``: a manifest CSV; a folder of ``<class>/`` or ``<domain>/<class>/``
    folders; or ``NAME:DOMAIN[,DOMAIN...]`` / ``NAME`` for a registered dataset,
    configured by ``config`` (an experiment YAML) and ``overrides``.
    """
    path = Path(spec)
    params = FileDatasetParams(
        image_size=model.image_size,
        test_fraction=0.0,
        classes=model.class_names,
        skip_bad=skip_bad,
    )
    if path.suffix.lower() == ".csv" and path.is_file():
        return build_file_dataset("manifest", read_manifest(path), params), None
    if path.is_dir():
        subdirs = [d for d in path.iterdir() if d.is_dir()]
        if not subdirs and image_files(path, recursive=True):
            raise DataError(
                f"{str(path)!r} holds images but no class folders; use `fedpath "
                "predict` for unlabelled images, or put them in <class>/ folders"
            )
        by_class = any(d.name in model.class_names for d in subdirs)
        rec = scan_class_folders(path) if by_class else scan_folders(path)
        _check_labels(rec, model, str(path))
        return build_file_dataset("folder", rec, params), None
    if path.exists():
        raise DataError(f"{spec!r}: expected a manifest .csv file or a folder")
    name, _, domains = spec.partition(":")
    data_cfg = load_config(config, [f"data.name={name}", *overrides]).data
    if "image_size" in data_cfg.params:
        data_cfg = replace(
            data_cfg, params={**data_cfg.params, "image_size": model.image_size}
        )
    ds = load_dataset(data_cfg)
    unknown = sorted(set(ds.classes) - set(model.class_names))
    if unknown:
        raise DataError(
            f"dataset {name!r} has classes {unknown} that the model does not know "
            f"(model classes: {model.class_names})"
        )
    chosen = [d for d in domains.split(",") if d] or None
    for d in chosen or []:
        ds.check_domain(d)
    return ds, chosen


def _check_labels(rec: Records, model: LoadedModel, where: str) -> None:
    unknown = sorted(set(rec.labels) - set(model.class_names))
    if unknown:
        raise DataError(
            f"{where}: class folders {unknown} are not classes of the model "
            f"{model.class_names}"
        )


def evaluate(
    model: LoadedModel,
    ds: DomainDataset,
    domains: Sequence[str] | None = None,
    per_domain: bool = False,
    batch_size: int = 256,
) -> dict[str, Any]:
    """The metrics of :func:`~fedpath.evaluation.metrics.metrics_with_confusion`
    (``confusion``: rows true, columns predicted), overall and per domain, of the
    model's (temperature-scaled) probabilities and argmax; with an operating point
    also ``operating_point``: the metrics at its threshold (with ``sensitivity``,
    ``specificity`` and that decision's ``confusion``)."""
    chosen = list(domains) if domains else list(ds.domains)
    split = Split.concat([ds.split(d, "all") for d in chosen])
    # map the dataset's class indices onto the model's
    remap = np.array([model.class_names.index(c) for c in ds.classes])
    labels = remap[split.labels]
    raw = predict_probs(model.model, split, batch_size, torch.device("cpu")).numpy()
    probs = model.calibrate(raw)

    def report(m: np.ndarray) -> dict[str, Any]:
        out: dict[str, Any] = {"n": int(m.sum())}
        out.update(metrics_with_confusion(labels[m], probs[m]))
        t = model.meta.threshold
        if t is not None:
            op = threshold_metrics(labels[m], probs[m], t)
            cm = confusion_matrix(labels[m], model.decide(probs[m]), 2)
            out["operating_point"] = {**op, "confusion": cm.tolist()}
        return out

    out = report(np.ones(len(split), dtype=bool))
    if model.meta.temperature is not None:
        out["temperature"] = model.meta.temperature
    if per_domain:
        out["per_domain"] = {d: report(split.domains == d) for d in chosen}
    return out


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
    files = (
        [target]
        if target.is_file()
        else (image_files(target, recursive=True) if target.is_dir() else [])
    )
    if not target.exists():
        raise DataError(f"{str(target)!r} does not exist")
    if not files:
        raise DataError(
            f"no images ({', '.join(IMAGE_SUFFIXES)}) under {str(target)!r}"
        )
    rows: list[list[str]] = []
    skipped: list[str] = []
    for start in range(0, len(files), batch_size):
        batch, names = [], []
        for f in files[start : start + batch_size]:
            try:
                batch.append(load_image(f, model.image_size))
                names.append(str(f))
            except DataError as err:
                if not skip_bad:
                    raise DataError(
                        f"{err} (use --skip-bad to skip and count)"
                    ) from None
                skipped.append(str(f))
        if batch:
            probs = model.predict_proba(torch.from_numpy(np.stack(batch)))
            decided = model.decide(probs)
            for name, p, c in zip(names, probs, decided, strict=True):
                rows.append([name, model.class_names[c], *(f"{v:.6f}" for v in p)])
        if progress is not None:
            progress(min(start + batch_size, len(files)), len(files))
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["path", "predicted", *(f"prob_{c}" for c in model.class_names)])
    writer.writerows(rows)
    if not rows:
        raise DataError(f"every image under {str(target)!r} was unreadable")
    atomic_write_text(out, buf.getvalue())
    return {"images": len(rows), "skipped": skipped}
