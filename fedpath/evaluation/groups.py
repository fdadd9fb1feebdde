"""Metrics per group (hospital, scanner, client) and the worst group, from the
pure metric functions of :mod:`fedpath.evaluation.metrics`."""

from __future__ import annotations

import numpy as np

from fedpath.evaluation.metrics import classification_metrics, validate_inputs


def per_group_metrics(
    y_true: np.ndarray, probs: np.ndarray, groups: np.ndarray
) -> dict[str, dict[str, float]]:
    """:func:`classification_metrics` computed separately for each group.

    Parameters
    ----------
    y_true : np.ndarray
        ``(N,)`` integer labels in ``[0, C)``.
    probs : np.ndarray
        ``(N, C)`` class probabilities.
    groups : np.ndarray
        ``(N,)`` group identifiers (e.g. hospital/centre). Values are converted
        with ``str()``, so ``3`` and ``"3"`` denote the same group.

    Returns
    -------
    dict[str, dict[str, float]]
        Metrics per group, keys sorted by group name (string order). The number
        of classes ``C`` is that of ``probs`` for every group.

    Raises
    ------
    ValueError
        On invalid inputs or if ``groups`` is not 1-D with ``N`` entries.
    """
    y, p = validate_inputs(y_true, probs)
    g = np.asarray(groups)
    if g.ndim != 1 or g.shape[0] != y.shape[0]:
        raise ValueError(
            f"groups must be a 1-D array with {y.shape[0]} entries, got shape {g.shape}"
        )
    names = g.astype(str)
    unique, inverse = np.unique(names, return_inverse=True)
    inverse = inverse.reshape(-1)
    return {
        str(name): classification_metrics(y[inverse == k], p[inverse == k])
        for k, name in enumerate(unique)
    }


def worst_group(
    per_group: dict[str, dict[str, float]], metric: str
) -> tuple[str, float]:
    """Group with the lowest value of ``metric`` (metrics are higher-is-better).

    Parameters
    ----------
    per_group : dict[str, dict[str, float]]
        Output of :func:`per_group_metrics` (or any mapping of that shape).
    metric : str
        Metric name; must be a key of every group's dictionary.

    Returns
    -------
    tuple[str, float]
        ``(group, value)``. ``nan`` values are ignored; ties go to the group that
        comes first in ``per_group``'s iteration order.

    Raises
    ------
    ValueError
        If ``per_group`` is empty, a group lacks ``metric``, or every value is
        ``nan``.
    """
    if not per_group:
        raise ValueError("per_group is empty: no group to choose from")
    best: tuple[str, float] | None = None
    for name, values in per_group.items():
        if metric not in values:
            raise ValueError(
                f"metric {metric!r} missing for group {name!r}; available: "
                f"{sorted(values)}"
            )
        value = float(values[metric])
        if np.isnan(value):
            continue
        if best is None or value < best[1]:
            best = (name, value)
    if best is None:
        raise ValueError(f"metric {metric!r} is NaN for every group")
    return best
