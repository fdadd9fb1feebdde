"""A :class:`~fedpath.evaluation.tables.ResultTable` as text: GitHub Markdown,
long-format CSV, or a ``booktabs`` LaTeX tabular.

Cells read ``mean ± std`` over seeds, or the value alone where one seed made the
cell (there is no spread to show, and ``± 0.00`` would claim one); the best entry
of each column (the highest displayed mean, the lowest for
:data:`~fedpath.evaluation.tables.LOWER_IS_BETTER`) is bold.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable

import numpy as np

from fedpath.evaluation.tables import ResultTable, best_rows

__all__ = ["cell_text", "latex_escape", "to_csv", "to_latex", "to_markdown"]

_MISSING_MD = "–"
_MISSING_TEX = "--"
_TEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def _check_decimals(decimals: int) -> None:
    if decimals < 0:
        raise ValueError(f"decimals must be >= 0, got {decimals}")


def _fmt(x: float, decimals: int) -> str:
    return f"{x:.{decimals}f}"


def cell_text(
    mean: float, std: float, n_seeds: int, decimals: int = 2, pm: str = " ± "
) -> str:
    """One cell: ``mean pm std``, or the mean alone when one seed made it (there
    is no spread to show). The rule of every results table fedpath writes: these
    formats, the report's HTML and the benchmarks' tables."""
    text = _fmt(mean, decimals)
    if n_seeds > 1:
        text += f"{pm}{_fmt(std, decimals)}"
    return text


def _body(
    table: ResultTable,
    decimals: int,
    bold_best: bool,
    name: Callable[[str], str],
    pm: str,
    bold: Callable[[str], str],
    missing: str,
) -> list[list[str]]:
    """Per method, its ``name``d label and every column's ``mean pm std`` text
    (the mean alone for one seed), through ``bold`` for the best of a column, or
    ``missing`` for no data."""
    best = best_rows(table, decimals) if bold_best else None
    rows = []
    for i, method in enumerate(table.methods):
        cells = [name(method)]
        for j in range(len(table.columns)):
            m, s = table.mean[i, j], table.std[i, j]
            if np.isnan(m):
                cells.append(missing)
                continue
            text = cell_text(m, s, table.n_seeds[i, j], decimals, pm)
            cells.append(bold(text) if best is not None and i in best[j] else text)
        rows.append(cells)
    return rows


def to_markdown(table: ResultTable, decimals: int = 2, bold_best: bool = True) -> str:
    """Render ``table`` as a GitHub-flavoured Markdown table.

    Parameters
    ----------
    table : ResultTable
        Table to render.
    decimals : int, default 2
        Digits after the decimal point.
    bold_best : bool, default True
        Wrap the cell(s) with the highest displayed mean of each column in
        ``**...**`` (the lowest for :data:`LOWER_IS_BETTER`; ties are all bold).

    Returns
    -------
    str
        ``| Method | T1 | ... | Avg |`` header, alignment row and one line per
        method; cells read ``95.25 ± 1.20`` (``95.25`` for one seed) and missing
        cells ``–``.
    """
    _check_decimals(decimals)

    def esc(name: str) -> str:
        return name.replace("|", "\\|")

    lines = [
        "| " + " | ".join(["Method", *map(esc, table.columns)]) + " |",
        "|" + "---|" + "---:|" * len(table.columns),
    ]
    body = _body(
        table, decimals, bold_best, esc, " ± ", lambda t: f"**{t}**", _MISSING_MD
    )
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines) + "\n"


def to_csv(table: ResultTable, decimals: int = 4) -> str:
    """Render ``table`` in long format, one line per (method, column).

    Parameters
    ----------
    table : ResultTable
        Table to render.
    decimals : int, default 4
        Digits after the decimal point for ``mean`` and ``std``.

    Returns
    -------
    str
        CSV text with header ``method,target,mean,std,n_seeds``; the ``Avg``
        column uses target ``Avg``. Missing ``mean``/``std`` are empty fields.
        Names are quoted by :mod:`csv` when needed.
    """
    _check_decimals(decimals)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["method", "target", "mean", "std", "n_seeds"])
    for i, method in enumerate(table.methods):
        for j, target in enumerate(table.columns):
            m, s = table.mean[i, j], table.std[i, j]
            writer.writerow(
                [
                    method,
                    target,
                    "" if np.isnan(m) else _fmt(m, decimals),
                    "" if np.isnan(s) else _fmt(s, decimals),
                    int(table.n_seeds[i, j]),
                ]
            )
    return buf.getvalue()


def latex_escape(text: str) -> str:
    """Escape LaTeX special characters (``\\ & % $ # _ { } ~ ^``) in ``text``."""
    return "".join(_TEX_SPECIALS.get(ch, ch) for ch in text)


def to_latex(
    table: ResultTable,
    decimals: int = 2,
    bold_best: bool = True,
    caption: str | None = None,
) -> str:
    """Render ``table`` as a ``booktabs`` LaTeX tabular.

    Parameters
    ----------
    table, decimals, bold_best
        As in :func:`to_markdown`; the best cells are ``\\textbf{...}``.
    caption : str or None, default None
        If given, the tabular is wrapped in a ``table`` environment with this
        ``\\caption``. The caption is inserted verbatim (it may contain LaTeX);
        method and target names are escaped.

    Returns
    -------
    str
        LaTeX source requiring ``\\usepackage{booktabs}``; cells read
        ``95.25 $\\pm$ 1.20`` (``95.25`` for one seed) and missing cells ``--``.
    """
    _check_decimals(decimals)
    header = " & ".join(["Method", *map(latex_escape, table.columns)])
    cells = _body(
        table, decimals, bold_best, latex_escape, " $\\pm$ ",
        lambda t: f"\\textbf{{{t}}}", _MISSING_TEX,
    )  # fmt: skip
    body = [" & ".join(row) + r" \\" for row in cells]

    tabular = [
        r"\begin{tabular}{l" + "c" * len(table.columns) + "}",
        r"\toprule",
        header + r" \\",
        r"\midrule",
        *body,
        r"\bottomrule",
        r"\end{tabular}",
    ]
    if caption is None:
        return "\n".join(tabular) + "\n"
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        f"\\caption{{{caption}}}",
        *tabular,
        r"\end{table}",
    ]
    return "\n".join(lines) + "\n"
