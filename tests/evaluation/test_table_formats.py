"""Tests for fedpath.evaluation.table_formats: a ResultTable as Markdown, CSV and
LaTeX text."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest

from fedpath.evaluation.table_formats import (
    latex_escape,
    to_csv,
    to_latex,
    to_markdown,
)
from fedpath.evaluation.tables import ResultRow, ResultTable, build_table
from tests.evaluation.table_cases import RAW, make_rows


@pytest.fixture
def table() -> ResultTable:
    return build_table(make_rows(RAW))


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
    # one seed each: the value alone, no made-up spread
    assert lines[3] == "| FedStain | **85.00** | **95.00** | – | – |"
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
    assert md.count("**90.00**") == 4  # T and Avg columns of m1 and m2
    assert "| m3 | 50.00 | 50.00 |" in md


def test_calibration_error_bolds_the_lowest() -> None:
    rows = [
        ResultRow("m1", "T", 0, {"ece": 0.05}),
        ResultRow("m2", "T", 0, {"ece": 0.20}),
    ]
    md = to_markdown(build_table(rows, metric="ece"))
    assert "| m1 | **5.00** | **5.00** |" in md
    assert "| m2 | 20.00 | 20.00 |" in md


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
    assert lines[5] == (r"FedStain & \textbf{85.00} & \textbf{95.00} & -- & -- \\")
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


def test_an_undefined_metric_renders_as_missing() -> None:
    rows = [
        ResultRow("FedAD", "A", 0, {"auroc": 0.8}),
        ResultRow("FedAD", "A", 1, {"auroc": math.nan}),
    ]
    table = build_table(rows, metric="auroc", scale=1.0)
    assert to_markdown(table).splitlines()[-1] == "| FedAD | – | – |"
    assert to_latex(table).splitlines()[4] == r"FedAD & -- & -- \\"
    assert to_csv(table).splitlines()[1] == "FedAD,A,,,2"
