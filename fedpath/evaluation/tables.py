"""Results tables in the layout of the papers: method x target domain.

Each cell holds the mean ± sample standard deviation (``ddof=1``) of one metric
over seeds, and a final ``Avg`` column summarises every method across target
domains.  :mod:`fedpath.evaluation.table_formats` renders it as Markdown,
long-format CSV, or a ``booktabs`` LaTeX tabular.

Metrics are *higher is better* except those in :data:`LOWER_IS_BETTER`
(``ece``, whose best entry is the lowest): the "best" entry of a column
(rendered in bold) is the one with the highest mean.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "AVG_LABEL",
    "LOWER_IS_BETTER",
    "ResultRow",
    "ResultTable",
    "best_rows",
    "build_table",
]

AVG_LABEL = "Avg"
#: metrics whose best value is the smallest (the calibration error)
LOWER_IS_BETTER = frozenset({"ece"})


@dataclass(frozen=True)
class ResultRow:
    """One evaluation: ``method`` trained with ``target`` held out, one ``seed``.

    Attributes
    ----------
    method : str
        Method name (table row).
    target : str
        Held-out target domain (table column).
    seed : int
        Random seed of the run.
    metrics : Mapping[str, float | None]
        Metric values of the run, e.g. from
        :func:`fedpath.evaluation.metrics.classification_metrics`; ``nan`` (or
        ``None``, a JSON ``null`` of older probe results) marks an undefined one.
    environment : str
        The run's software and arithmetic in one line
        (:func:`fedpath.runtime.environment.fingerprint`); empty when the run
        recorded none.
    """

    method: str
    target: str
    seed: int
    metrics: Mapping[str, float | None]
    environment: str = ""


@dataclass(frozen=True, eq=False)
class ResultTable:
    """Aggregated results of one metric.

    Attributes
    ----------
    metric : str
        Name of the aggregated metric.
    methods : list[str]
        Row labels.
    targets : list[str]
        Column labels, without the trailing ``Avg`` column.
    mean, std : np.ndarray
        ``(len(methods), len(targets) + 1)`` float arrays; the last column is
        ``Avg``. ``nan`` where a cell has no data.
    n_seeds : np.ndarray
        Same shape, ``int``: number of seeds aggregated in each cell (for ``Avg``,
        the number of seeds that cover every target).
    """

    metric: str
    methods: list[str]
    targets: list[str]
    mean: np.ndarray
    std: np.ndarray
    n_seeds: np.ndarray

    def __post_init__(self) -> None:
        shape = (len(self.methods), len(self.targets) + 1)
        for name in ("mean", "std", "n_seeds"):
            arr = getattr(self, name)
            if arr.shape != shape:
                raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")

    @property
    def columns(self) -> list[str]:
        """Column labels including the trailing ``Avg`` column."""
        return [*self.targets, AVG_LABEL]


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=np.float64)
    mean = float(arr.mean())
    std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return mean, std


def build_table(
    rows: Sequence[ResultRow],
    metric: str = "accuracy",
    scale: float = 100.0,
    sort_targets: bool = False,
) -> ResultTable:
    """Aggregate per-seed results into a method x target table.

    Parameters
    ----------
    rows : Sequence[ResultRow]
        One row per (method, target, seed) run; must be non-empty.
    metric : str, default "accuracy"
        Key looked up in every row's ``metrics``.
    scale : float, default 100.0
        Factor applied to every value before aggregation (100 -> percent).
    sort_targets : bool, default False
        Sort the target columns alphabetically instead of keeping the order of
        first appearance. Methods always keep their order of first appearance.

    Returns
    -------
    ResultTable
        Cell ``(method, target)`` holds the mean/std over seeds of
        ``metrics[metric] * scale``; the std is the sample std (``ddof=1``), 0
        with a single seed. The ``Avg`` cell of a method averages, for every
        seed that has results on *all* targets of the table, the values over the
        targets, then takes the mean/std over those seeds; ``nan`` if no seed is
        complete. A ``nan`` (or ``None``) metric value, e.g. an undefined
        AUROC, propagates to its cell and to ``Avg``.

    Raises
    ------
    ValueError
        If ``rows`` is empty, a (method, target, seed) triple appears twice, or
        a row lacks ``metric``.
    """
    if len(rows) == 0:
        raise ValueError("rows must contain at least one ResultRow")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")

    methods: dict[str, None] = {}
    targets: dict[str, None] = {}
    values: dict[tuple[str, str], dict[int, float]] = {}
    for row in rows:
        if metric not in row.metrics:
            raise ValueError(
                f"metric {metric!r} missing in row (method={row.method!r}, "
                f"target={row.target!r}, seed={row.seed}); available metrics: "
                f"{sorted(row.metrics)}"
            )
        cell = values.setdefault((row.method, row.target), {})
        if row.seed in cell:
            raise ValueError(
                f"duplicate result for method={row.method!r}, "
                f"target={row.target!r}, seed={row.seed}"
            )
        value = row.metrics[metric]
        cell[row.seed] = (math.nan if value is None else float(value)) * scale
        methods.setdefault(row.method, None)
        targets.setdefault(row.target, None)

    method_list = list(methods)
    target_list = sorted(targets) if sort_targets else list(targets)
    shape = (len(method_list), len(target_list) + 1)
    mean = np.full(shape, np.nan)
    std = np.full(shape, np.nan)
    n_seeds = np.zeros(shape, dtype=int)

    for i, method in enumerate(method_list):
        cells = [values.get((method, target), {}) for target in target_list]
        for j, cell in enumerate(cells):
            if cell:
                mean[i, j], std[i, j] = _mean_std(list(cell.values()))
                n_seeds[i, j] = len(cell)
        complete = set(cells[0]).intersection(*cells[1:])
        if complete:
            per_seed = [
                float(np.mean([cell[seed] for cell in cells]))
                for seed in sorted(complete)
            ]
            mean[i, -1], std[i, -1] = _mean_std(per_seed)
            n_seeds[i, -1] = len(per_seed)

    return ResultTable(
        metric=metric,
        methods=method_list,
        targets=target_list,
        mean=mean,
        std=std,
        n_seeds=n_seeds,
    )


def best_rows(table: ResultTable, decimals: int) -> list[set[int]]:
    """Per column, the row indices whose displayed mean equals the best one."""
    best: list[set[int]] = []
    for j in range(table.mean.shape[1]):
        col = np.round(table.mean[:, j], decimals)
        valid = ~np.isnan(col)
        if not valid.any():
            best.append(set())
            continue
        top = col[valid].min() if table.metric in LOWER_IS_BETTER else col[valid].max()
        best.append({int(i) for i in np.flatnonzero(valid & (col == top))})
    return best
