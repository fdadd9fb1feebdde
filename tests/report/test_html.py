"""The page's HTML (fedpath.report.html): escaped text, the results table with its
best and worst marked, and a page that fetches nothing."""

from __future__ import annotations

import math
import re

from fedpath.evaluation.tables import ResultRow, build_table
from fedpath.report.html import esc, img, page, result_table


def _table(metric: str = "accuracy") -> str:
    rows = [
        ResultRow("a<b", "h0", 0, {metric: 0.9}),
        ResultRow("a<b", "h1", 0, {metric: 0.5}),
        ResultRow("c", "h0", 0, {metric: 0.7}),
        ResultRow("c", "h1", 0, {metric: math.nan}),
    ]
    return result_table(build_table(rows, metric=metric, scale=100.0))


def test_text_is_escaped() -> None:
    assert esc('<a href="x">&') == "&lt;a href=&quot;x&quot;&gt;&amp;"
    assert esc(3) == "3"


def test_the_results_table_marks_the_best_and_names_the_worst() -> None:
    html = _table()
    assert html.startswith('<table class="results" data-metric="accuracy">')
    cells = re.findall(
        r'<td class="([^"]+)" data-method="([^"]+)" data-column="([^"]+)"', html
    )
    assert ("num best", "a&lt;b", "h0") in cells  # 90 beats 70
    assert ("num", "c", "h0") in cells
    assert '<td class="num">–</td>' in html  # c has no h1 value
    assert "<th>Worst domain</th>" in html
    assert '<td class="num">50.00 (h1)</td>' in html  # a<b's lowest
    assert 'data-mean="90.0"' in html  # the unrounded mean, for the tests
    plain = result_table(
        build_table([ResultRow("m", "t", 0, {"x": 1.0})], "x"), worst=False, key="k"
    )
    assert 'data-metric="k"' in plain and "Worst domain" not in plain


def test_for_calibration_the_worst_domain_is_the_highest() -> None:
    assert '<td class="num">90.00 (h0)</td>' in _table("ece")


def test_a_page_is_self_contained() -> None:
    html = page("t<1>", ["<p>x</p>", img(b"png-bytes", "alt")])
    assert html.startswith("<!DOCTYPE html>") and "<title>t&lt;1&gt;</title>" in html
    assert 'src="data:image/png;base64,cG5nLWJ5dGVz"' in html
    assert "<script" not in html and "http" not in html


def test_a_cell_shows_a_spread_only_when_seeds_made_one() -> None:
    rows = [
        ResultRow("two", "t", 0, {"x": 0.8}),
        ResultRow("two", "t", 1, {"x": 0.9}),
        ResultRow("one", "t", 0, {"x": 0.7}),
    ]
    html = result_table(build_table(rows, "x", scale=100.0), worst=False)
    texts = re.findall(r'data-column="t" data-mean="[^"]+">([^<]+)</td>', html)
    assert texts == ["85.00 ± 7.07", "70.00"]  # sample std of 80 and 90; one seed
