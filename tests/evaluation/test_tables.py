"""Tests for fedpath.evaluation.tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpath.evaluation.tables import (
    ResultRow,
    ResultTable,
    best_rows,
    build_table,
)
from tests.evaluation.table_cases import RAW, make_rows


@pytest.fixture
def table() -> ResultTable:
    return build_table(make_rows(RAW))


def test_structure_follows_first_appearance(table: ResultTable) -> None:
    assert table.metric == "accuracy"
    assert table.methods == ["FedAvg", "FedStain"]
    assert table.targets == ["B", "A", "C"]
    assert table.columns == ["B", "A", "C", "Avg"]
    assert table.mean.shape == table.std.shape == table.n_seeds.shape == (2, 4)


def test_sort_targets() -> None:
    sorted_table = build_table(make_rows(RAW), sort_targets=True)
    assert sorted_table.targets == ["A", "B", "C"]
    expected = 100 * np.mean([0.9, 0.86, 0.80])
    np.testing.assert_allclose(sorted_table.mean[0, 0], expected)


def test_cells_match_numpy(table: ResultTable) -> None:
    for i, method in enumerate(table.methods):
        for j, target in enumerate(table.targets):
            seeds = RAW.get((method, target))
            if seeds is None:
                assert math.isnan(table.mean[i, j])
                assert math.isnan(table.std[i, j])
                assert table.n_seeds[i, j] == 0
                continue
            values = 100 * np.array(list(seeds.values()))
            expected_std = values.std(ddof=1) if values.size > 1 else 0.0
            assert table.mean[i, j] == pytest.approx(values.mean())
            assert table.std[i, j] == pytest.approx(expected_std)
            assert table.n_seeds[i, j] == values.size


def test_single_seed_has_zero_std(table: ResultTable) -> None:
    assert table.std[1, 0] == 0.0
    assert table.std[1, 1] == 0.0
    assert table.mean[1, 0] == pytest.approx(85.0)


def test_avg_column_is_computed_per_complete_seed(table: ResultTable) -> None:
    # FedAvg: seeds 0 and 1 cover all three targets; seed 2 lacks "B".
    per_seed = 100 * np.array(
        [np.mean([0.80, 0.90, 0.70]), np.mean([0.84, 0.86, 0.74])]
    )
    assert table.mean[0, -1] == pytest.approx(per_seed.mean())
    assert table.std[0, -1] == pytest.approx(per_seed.std(ddof=1))
    assert table.n_seeds[0, -1] == 2
    # which differs from the mean of the column means (seed 2 is excluded)
    assert table.mean[0, -1] != pytest.approx(np.mean(table.mean[0, :3]))
    # FedStain has no result on "C": no complete seed -> NaN
    assert math.isnan(table.mean[1, -1])
    assert math.isnan(table.std[1, -1])
    assert table.n_seeds[1, -1] == 0


def test_other_metric_and_scale() -> None:
    table = build_table(make_rows(RAW), metric="auroc", scale=1.0)
    assert table.metric == "auroc"
    assert table.mean[0, 1] == pytest.approx(np.mean([0.45, 0.43, 0.40]))
    assert table.std[0, 1] == pytest.approx(np.std([0.45, 0.43, 0.40], ddof=1))


def test_undefined_metric_is_nan_whether_nan_or_null() -> None:
    # NaN is the convention; probe results written before it hold JSON null
    rows = [
        ResultRow("FedAD", "A", 0, {"auroc": 0.8}),
        ResultRow("FedAD", "A", 1, {"auroc": math.nan}),
        ResultRow("FedAD", "B", 0, {"auroc": None}),
        ResultRow("FedAD", "B", 1, {"auroc": 0.6}),
    ]
    table = build_table(rows, metric="auroc", scale=1.0)
    assert np.isnan(table.mean).all() and table.n_seeds.tolist() == [[2, 2, 2]]


def test_duplicate_rows_rejected() -> None:
    rows = [*make_rows(RAW), ResultRow("FedAvg", "A", 1, {"accuracy": 0.5})]
    with pytest.raises(
        ValueError, match=r"duplicate.*method='FedAvg', target='A', seed=1"
    ):
        build_table(rows)


def test_unknown_metric_rejected() -> None:
    with pytest.raises(
        ValueError,
        match=r"'f1' missing.*method='FedAvg', target='B', seed=0.*"
        r"\['accuracy', 'auroc'\]",
    ):
        build_table(make_rows(RAW), metric="f1")


def test_empty_rows_rejected() -> None:
    with pytest.raises(ValueError, match="rows must contain at least one"):
        build_table([])


def test_best_rows_are_ties_on_the_displayed_mean() -> None:
    rows = [
        ResultRow("m1", "T", 0, {"accuracy": 0.90001, "ece": 0.05}),
        ResultRow("m2", "T", 0, {"accuracy": 0.90002, "ece": 0.20}),
        ResultRow("m3", "T", 0, {"accuracy": 0.5, "ece": 0.05}),
    ]
    acc = build_table(rows)
    assert best_rows(acc, decimals=2) == [{0, 1}, {0, 1}]  # 90.00 twice
    assert best_rows(acc, decimals=4) == [{1}, {1}]  # 90.0010 < 90.0020
    ece = build_table(rows, metric="ece")  # lower is better
    assert best_rows(ece, decimals=2) == [{0, 2}, {0, 2}]
    empty = build_table([*rows[:1], ResultRow("m4", "U", 0, {"accuracy": 0.1})])
    assert best_rows(empty, decimals=2)[:2] == [{0}, {1}]
    assert best_rows(empty, decimals=2)[2] == set()  # Avg: no complete seed


def test_result_table_shape_checked() -> None:
    with pytest.raises(ValueError, match=r"mean must have shape \(1, 2\)"):
        ResultTable(
            metric="accuracy",
            methods=["m"],
            targets=["t"],
            mean=np.zeros((1, 1)),
            std=np.zeros((1, 2)),
            n_seeds=np.zeros((1, 2), dtype=int),
        )
