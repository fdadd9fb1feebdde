"""Tests for fedpath.evaluation.tables."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest

from fedpath.evaluation.tables import (
    ResultRow,
    ResultTable,
    build_table,
    latex_escape,
    separation,
    to_csv,
    to_latex,
    to_markdown,
)

# accuracy (fraction) per (method, target, seed); FedAvg has a seed (2) that
# misses target "B", and FedStain has no result at all on target "C".
RAW: dict[tuple[str, str], dict[int, float]] = {
    ("FedAvg", "B"): {0: 0.80, 1: 0.84},
    ("FedAvg", "A"): {0: 0.90, 1: 0.86, 2: 0.80},
    ("FedAvg", "C"): {0: 0.70, 1: 0.74, 2: 0.72},
    ("FedStain", "A"): {0: 0.95},
    ("FedStain", "B"): {0: 0.85},
}


def make_rows(raw: dict[tuple[str, str], dict[int, float]]) -> list[ResultRow]:
    return [
        ResultRow(method, target, seed, {"accuracy": value, "auroc": value / 2})
        for (method, target), seeds in raw.items()
        for seed, value in seeds.items()
    ]


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
    assert "–" in to_markdown(table)


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


def test_markdown(table: ResultTable) -> None:
    md = to_markdown(table)
    lines = md.strip().splitlines()
    assert lines[0] == "| Method | B | A | C | Avg |"
    assert lines[1] == "|---|---:|---:|---:|---:|"
    b_values = 100 * np.array([0.80, 0.84])
    assert f"{b_values.mean():.2f} ± {b_values.std(ddof=1):.2f}" == "82.00 ± 2.83"
    # FedStain (85.00) beats FedAvg on B and A; FedAvg is the only entry on C/Avg
    assert lines[2] == (
        "| FedAvg | 82.00 ± 2.83 | 85.33 ± 5.03 | **72.00 ± 2.00** | **80.67 ± 0.94** |"
    )
    assert lines[3] == "| FedStain | **85.00 ± 0.00** | **95.00 ± 0.00** | – | – |"
    plain = to_markdown(table, decimals=1, bold_best=False)
    assert "**" not in plain
    assert "| FedAvg | 82.0 ± 2.8 |" in plain


def test_bold_ties_on_displayed_value() -> None:
    rows = [
        ResultRow("m1", "T", 0, {"accuracy": 0.90001}),
        ResultRow("m2", "T", 0, {"accuracy": 0.90002}),
        ResultRow("m3", "T", 0, {"accuracy": 0.5}),
    ]
    md = to_markdown(build_table(rows))
    assert md.count("**90.00 ± 0.00**") == 4  # T and Avg columns of m1 and m2
    assert "| m3 | 50.00 ± 0.00 | 50.00 ± 0.00 |" in md


def test_calibration_error_bolds_the_lowest() -> None:
    rows = [
        ResultRow("m1", "T", 0, {"ece": 0.05}),
        ResultRow("m2", "T", 0, {"ece": 0.20}),
    ]
    md = to_markdown(build_table(rows, metric="ece"))
    assert "| m1 | **5.00 ± 0.00** | **5.00 ± 0.00** |" in md
    assert "| m2 | 20.00 ± 0.00 | 20.00 ± 0.00 |" in md


def test_csv(table: ResultTable) -> None:
    text = to_csv(table)
    records = list(csv.DictReader(io.StringIO(text)))
    assert text.splitlines()[0] == "method,target,mean,std,n_seeds"
    assert len(records) == 2 * 4
    assert [r["target"] for r in records[:4]] == ["B", "A", "C", "Avg"]
    assert records[0] == {
        "method": "FedAvg",
        "target": "B",
        "mean": "82.0000",
        "std": "2.8284",
        "n_seeds": "2",
    }
    avg = records[3]
    assert float(avg["mean"]) == pytest.approx(table.mean[0, -1], abs=1e-4)
    assert avg["n_seeds"] == "2"
    missing = records[6]
    assert (missing["method"], missing["target"]) == ("FedStain", "C")
    assert (missing["mean"], missing["std"], missing["n_seeds"]) == ("", "", "0")


def test_csv_quotes_names_with_commas() -> None:
    rows = [ResultRow("Fed,Avg", "T", 0, {"accuracy": 1.0})]
    records = list(csv.reader(io.StringIO(to_csv(build_table(rows), decimals=1))))
    assert records[1] == ["Fed,Avg", "T", "100.0", "0.0", "1"]


def test_latex(table: ResultTable) -> None:
    tex = to_latex(table)
    lines = tex.strip().splitlines()
    assert lines[0] == r"\begin{tabular}{lcccc}"
    assert lines[1:4] == [r"\toprule", r"Method & B & A & C & Avg \\", r"\midrule"]
    assert lines[4] == (
        r"FedAvg & 82.00 $\pm$ 2.83 & 85.33 $\pm$ 5.03 & "
        r"\textbf{72.00 $\pm$ 2.00} & \textbf{80.67 $\pm$ 0.94} \\"
    )
    assert lines[5] == (
        r"FedStain & \textbf{85.00 $\pm$ 0.00} & \textbf{95.00 $\pm$ 0.00} "
        r"& -- & -- \\"
    )
    assert lines[-2:] == [r"\bottomrule", r"\end{tabular}"]
    assert r"\begin{table}" not in tex
    assert r"\textbf" not in to_latex(table, bold_best=False)


def test_latex_escaping_and_caption() -> None:
    rows = [ResultRow("Fed_Avg & 50%", "site_#1", 0, {"accuracy": 0.5})]
    tex = to_latex(build_table(rows), caption="Accuracy (\\%)")
    assert r"Fed\_Avg \& 50\%" in tex
    assert r"site\_\#1" in tex
    assert "Fed_Avg" not in tex
    assert tex.startswith("\\begin{table}[t]\n\\centering\n\\caption{Accuracy (\\%)}")
    assert tex.rstrip().endswith(r"\end{table}")
    assert latex_escape(r"a\b{c}~^$") == (
        r"a\textbackslash{}b\{c\}\textasciitilde{}\textasciicircum{}\$"
    )


def test_markdown_escapes_pipes() -> None:
    rows = [ResultRow("A|B", "T", 0, {"accuracy": 0.5})]
    assert "| A\\|B |" in to_markdown(build_table(rows))


def test_negative_decimals_rejected(table: ResultTable) -> None:
    with pytest.raises(ValueError, match="decimals must be >= 0"):
        to_markdown(table, decimals=-1)
    with pytest.raises(ValueError, match="decimals must be >= 0"):
        to_csv(table, decimals=-1)


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


def _avg_table(values: dict[str, list[float]]) -> ResultTable:
    """One target, so each method's Avg over seeds is its values' mean ± std."""
    rows = [
        ResultRow(m, "h0", s, {"accuracy": v / 100})
        for m, vs in values.items()
        for s, v in enumerate(vs)
    ]
    return build_table(rows, metric="accuracy")


def test_separation_says_whether_a_gap_exceeds_the_seed_spread() -> None:
    # fedavg 70 ± 1.41 (seeds 69, 71); big 80 ± 1.41: gap 10 > 1.41 + 1.41;
    # close 71.5 ± 0.71 (71, 72): gap 1.5 < 1.41 + 0.71, within
    table = _avg_table(
        {"fedavg": [69.0, 71.0], "big": [79.0, 81.0], "close": [71.0, 72.0]}
    )
    line = separation(table, "fedavg")
    big, close = line.rstrip(".").split("; ")
    assert big.startswith("big's average is 10.00 points above fedavg's")
    assert "(80.00 ± 1.41 vs 70.00 ± 1.41, 2 seeds)" in big
    assert big.endswith("larger than the seed spread")
    assert close.startswith("close's average is 1.50 points above")
    assert close.endswith("within the seed spread")
    low = separation(_avg_table({"fedavg": [70.0, 72.0], "x": [60.0, 61.0]}), "fedavg")
    assert "10.50 points below" in low and low.endswith("larger than the seed spread.")
    one = separation(_avg_table({"fedavg": [70.0], "x": [90.0]}), "fedavg")
    assert one.endswith("one seed, no spread to compare with.")
    assert separation(table, "absent") == ""
