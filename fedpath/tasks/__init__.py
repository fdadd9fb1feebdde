"""Training tasks, one per data kind: images (patch classifiers) and slide bags (MIL).

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
from fedpath.tasks.images import ImageTask

#: the task of each data kind (``DomainDataset.kind``)
TASKS: dict[str, type[Task]] = {t.kind: t for t in (ImageTask, BagTask)}


def make_task(cfg: ExperimentConfig, dataset: DomainDataset) -> Task:
    """The task for ``dataset``; an algorithm that trains on another kind of data
    fails here, at the start of a run, naming the algorithms that fit."""
    task = TASKS[dataset.kind](cfg, dataset)
    wanted = ALGORITHMS.get(cfg.algorithm.name).data
    if wanted != task.kind:
        fitting = [n for n in ALGORITHMS.names() if ALGORITHMS.get(n).data == task.kind]
        raise TaskMismatch(
            f"{task._mismatch(wanted)}; algorithms for {task.kind}: "
            + ", ".join(fitting)
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
    "ImageTask",
    "Task",
    "TaskMismatch",
    "fit_bags",
    "make_task",
    "require_kind",
]
