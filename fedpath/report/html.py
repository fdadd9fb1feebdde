"""A self-contained HTML page: inline CSS, images as data URIs, no script, no
network; it opens from a file system in any browser."""

from __future__ import annotations

import base64
import html
import io
from typing import Any

import numpy as np

from fedpath.evaluation.table_formats import cell_text
from fedpath.evaluation.tables import LOWER_IS_BETTER, ResultTable, best_rows

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
       margin: 2em auto; max-width: 1200px; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #b0609f; padding-bottom: .2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
h3 { margin-top: 1.5em; }
table.results { border-collapse: collapse; margin: .8em 0; font-size: 14px; }
table.results th, table.results td { border: 1px solid #ccc; padding: 4px 9px; }
table.results td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.results td.best { font-weight: bold; background: #f4e6f1; }
table.results th { background: #f3f3f3; }
p.note { color: #555; font-size: 14px; }
img.fig { max-width: 100%; border: 1px solid #eee; margin: .5em 0; }
pre { background: #f7f7f7; padding: .8em; overflow-x: auto; font-size: 12px; }
table.identity th { text-align: left; padding: 2px 1.2em 2px 0; vertical-align: top; }
table.identity td { font-family: monospace; font-size: 13px; }
details { margin: .4em 0; }
details summary { cursor: pointer; }
"""


def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def fig_png(fig: Any, dpi: int = 100) -> bytes:
    """A matplotlib figure as PNG bytes (the figure is closed)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()


def img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img class="fig" alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def result_table(
    table: ResultTable, decimals: int = 2, worst: bool = True, key: str | None = None
) -> str:
    """``table`` as HTML: mean ± std per cell (the mean alone for one seed), the
    best of each column marked (class ``best``), a ``Worst`` column (the lowest
    per-domain mean) if asked.

    Each value cell carries ``data-mean`` (the unrounded mean) so a test can
    compare the page with ``final.json``; the table's ``data-metric`` is ``key``
    (default: the metric).
    """
    best = best_rows(table, decimals)
    cols = list(table.columns)
    head = "".join(f"<th>{esc(c)}</th>" for c in ["Method", *cols])
    if worst:
        head += "<th>Worst domain</th>"
    rows = []
    for i, method in enumerate(table.methods):
        cells = [f"<th>{esc(method)}</th>"]
        for j in range(len(cols)):
            m, s = table.mean[i, j], table.std[i, j]
            if np.isnan(m):
                cells.append('<td class="num">–</td>')
                continue
            cls = "num best" if i in best[j] else "num"
            text = cell_text(m, s, table.n_seeds[i, j], decimals)
            cells.append(
                f'<td class="{cls}" data-method="{esc(method)}" '
                f'data-column="{esc(cols[j])}" data-mean="{float(m)!r}">{text}</td>'
            )
        if worst:
            per = table.mean[i, :-1]
            if (~np.isnan(per)).any():
                high = table.metric in LOWER_IS_BETTER  # the worst is the highest
                k = int(np.nanargmax(per) if high else np.nanargmin(per))
                cells.append(
                    f'<td class="num">{per[k]:.{decimals}f} '
                    f"({esc(table.targets[k])})</td>"
                )
            else:
                cells.append('<td class="num">–</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<table class="results" data-metric="{esc(key or table.metric)}">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def page(title: str, body: list[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )
