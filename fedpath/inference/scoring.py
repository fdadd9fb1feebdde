"""The metrics of a model file on a site's data: overall, per domain, clinical.

Metrics overall and per domain, per-class sensitivity and specificity and
bootstrap confidence intervals (:mod:`fedpath.evaluation.clinical`). A model
file's temperature scales every probability, and its operating point (a threshold
on the positive class) makes the predictions and an ``operating_point`` block of
metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fedpath.config import ConfigError
from fedpath.data.bags import split_bags
from fedpath.data.base import DataError, DomainDataset, Part, Split
from fedpath.evaluation.calibration import threshold_metrics
from fedpath.evaluation.clinical import bootstrap_ci, per_class_rates
from fedpath.evaluation.metrics import confusion_matrix, metrics_with_confusion
from fedpath.inference.opening import AnyModel, check_split
from fedpath.mil.export import LoadedMILModel
from fedpath.tasks.images import predict_probs


def _probabilities(model: AnyModel, data: Split, batch_size: int) -> np.ndarray:
    """The model's (temperature-scaled) class probabilities of ``data``: one
    slide per bag for a MIL model, one image per sample for an image model."""
    if isinstance(model, LoadedMILModel):
        return model.predict_proba(split_bags(data))
    cpu = torch.device("cpu")
    raw = predict_probs(model.model, data, batch_size, cpu, model.meta.tta)
    return model.calibrate(raw.numpy())


def _report(
    model: AnyModel,
    labels: np.ndarray,
    probs: np.ndarray,
    bootstrap: int,
    seed: int,
) -> dict[str, Any]:
    """The metrics of one report (:func:`evaluate`) of ``labels`` and ``probs``."""
    out: dict[str, Any] = {"n": len(labels)}
    out.update(metrics_with_confusion(labels, probs))
    out["per_class"] = per_class_rates(np.asarray(out["confusion"]), model.class_names)
    if bootstrap:
        out["bootstrap"] = bootstrap_ci(labels, probs, None, bootstrap, seed)
    t = model.meta.threshold
    if t is not None:
        op = threshold_metrics(labels, probs, t)
        cm = confusion_matrix(labels, model.decide(probs), 2)
        out["operating_point"] = {**op, "confusion": cm.tolist()}
    return out


def evaluate(
    model: AnyModel,
    ds: DomainDataset,
    domains: Sequence[str] | None = None,
    per_domain: bool = False,
    batch_size: int = 256,
    split: str = "all",
    bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """The metrics of :func:`~fedpath.evaluation.metrics.metrics_with_confusion`
    (``confusion``: rows true, columns predicted, in the order of ``classes``),
    overall and per domain, of the model's (temperature-scaled) probabilities and
    argmax on the ``split`` part (``all``, ``test``, ``train``) of ``domains``.

    Each report also holds ``per_class`` (``n``, ``sensitivity``,
    ``specificity`` one-vs-rest: :func:`~fedpath.evaluation.clinical.
    per_class_rates`) and, unless ``bootstrap`` is 0, ``bootstrap``: 95%
    intervals of ``balanced_accuracy`` and ``auroc`` over ``bootstrap``
    resamples of the images, seeded by ``seed``
    (:func:`~fedpath.evaluation.clinical.bootstrap_ci`). With an operating point
    also ``operating_point``: the metrics at its threshold (with ``sensitivity``,
    ``specificity`` and that decision's ``confusion``). A MIL model scores the
    slides of a bag dataset the same way, one slide per sample
    (:meth:`~fedpath.mil.export.LoadedMILModel.predict_proba`)."""
    if bootstrap < 0:
        raise ConfigError(
            f"--bootstrap: expected 0 (off) or more resamples, got {bootstrap}"
        )
    check_split(split)
    part: Part = "test" if split == "test" else ("train" if split == "train" else "all")
    chosen = list(domains) if domains else list(ds.domains)
    parts = [s for s in (ds.split(d, part) for d in chosen) if len(s)]
    if not parts:
        raise DataError(
            f"--split {split}: dataset {ds.name!r} has no {split} {model.unit} in "
            f"{', '.join(chosen)}"
        )
    data = Split.concat(parts)
    # map the dataset's class indices onto the model's
    remap = np.array([model.class_names.index(c) for c in ds.classes])
    labels = remap[data.labels]
    probs = _probabilities(model, data, batch_size)
    out: dict[str, Any] = {"classes": model.class_names, "split": split}
    out.update(_report(model, labels, probs, bootstrap, seed))
    if model.meta.temperature is not None:
        out["temperature"] = model.meta.temperature
    if per_domain:
        present = [d for d in chosen if np.any(data.domains == d)]
        out["per_domain"] = {
            d: _report(model, labels[m], probs[m], bootstrap, seed)
            for d in present
            for m in [data.domains == d]
        }
    return out
