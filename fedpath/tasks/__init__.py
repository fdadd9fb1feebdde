"""Training tasks, one per data kind: images (patch classifiers), slide bags (MIL),
and images encoded once by a frozen encoder (``train.cache_features``).

:func:`make_task` picks the dataset's task and checks that the algorithm trains
on that kind of data. The self-supervised image methods use the image task: only
their loss differs (it ignores the labels).
"""

from __future__ import annotations

from fedpath.config import ExperimentConfig
from fedpath.data.base import DomainDataset
from fedpath.registry import ALGORITHMS
from fedpath.tasks.bags import BagTask, fit_bags
from fedpath.tasks.base import Task, TaskMismatch
from fedpath.tasks.features import FeatureTask, prepare_dataset
from fedpath.tasks.images import ImageTask

#: the task of each data kind (``DomainDataset.kind``)
TASKS: dict[str, type[Task]] = {t.kind: t for t in (ImageTask, BagTask, FeatureTask)}


def trains_on(name: str, kind: str) -> bool:
    """Whether algorithm ``name`` trains on data of ``kind``: its own kind, or
    the cached embeddings of a frozen encoder for the image methods that only
    classify their inputs (registered with ``features=True``)."""
    spec = ALGORITHMS.get(name)
    return spec.data == kind or (kind == FeatureTask.kind and spec.features)


def make_task(cfg: ExperimentConfig, dataset: DomainDataset) -> Task:
    """The task for ``dataset``; an algorithm that trains on another kind of data
    fails here, at the start of a run, naming the algorithms that fit."""
    task = TASKS[dataset.kind](cfg, dataset)
    name = cfg.algorithm.name
    if not trains_on(name, task.kind):
        fitting = ", ".join(n for n in ALGORITHMS.names() if trains_on(n, task.kind))
        if task.kind == FeatureTask.kind:
            raise TaskMismatch(
                f"config key 'train.cache_features': algorithm {name!r} transforms "
                "or encodes the images themselves, so it cannot train on cached "
                f"features; algorithms that can: {fitting} (or set "
                "train.cache_features: false)"
            )
        raise TaskMismatch(
            f"{task._mismatch(ALGORITHMS.get(name).data)}; algorithms for "
            f"{task.kind}: {fitting}"
        )
    return task


def require_kind(dataset: DomainDataset, kind: str, what: str) -> None:
    """Refuse a dataset of another data kind than a tool needs (``what`` names the
    option and the tool)."""
    if dataset.kind != kind:
        raise TaskMismatch(
            f"{what} needs a dataset of {kind}, got {dataset.name!r} holding "
            f"{dataset.kind}"
        )


__all__ = [
    "TASKS",
    "BagTask",
    "FeatureTask",
    "ImageTask",
    "Task",
    "TaskMismatch",
    "fit_bags",
    "make_task",
    "prepare_dataset",
    "require_kind",
    "trains_on",
]
