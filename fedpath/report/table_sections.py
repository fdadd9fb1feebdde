"""The report's tables of one experiment: the papers' table per metric, the
sources' own accuracy, the selected round, averaged weights and BatchNorm
adaptation beside it."""

from __future__ import annotations

from typing import Any

from fedpath.report.builder import Builder
from fedpath.report.html import esc, result_table
from fedpath.report.runs import Experiment

#: the metrics a table is drawn for, where the runs have them
TABLE_METRICS = ("balanced_accuracy", "accuracy", "auroc", "f1", "ece")
#: the tables shown folded (under "more metrics"), after the first three
FOLDED_METRICS = ("f1", "ece")


def tables(b: Builder, exp: Experiment) -> None:
    from fedpath.evaluation.tables import build_table
    from fedpath.runtime.experiment import collect_rows

    if not exp.finished:
        b.add('<p class="note">No finished run yet: no table.</p>')
        return
    methods = exp.methods
    split = "clients" if exp.per_client else "target"
    if split == "target" and all(r.target == "none" for r in exp.finished):
        split = "validation"  # consortium mode: nothing held out (docs/ship.md)
    rows = [r for r in collect_rows([exp.root], split) if r.method in methods]
    label = {
        "target": "at the unseen domain",
        "clients": "on each client's own test slides (clients x methods)",
        "validation": "on the hospitals' validation slides (consortium: every "
        "hospital trained, none held out)",
    }[split]
    for metric in TABLE_METRICS:
        have = [r for r in rows if isinstance(r.metrics.get(metric), int | float)]
        if not have:
            continue
        table = build_table(
            have, metric=metric, scale=1.0 if metric == "ece" else 100.0
        )
        table = _ordered(table, methods)
        unit = "" if metric == "ece" else " (%)"
        heading = f"{esc(metric)}{unit} {esc(label)}"
        html = result_table(table, decimals=3 if metric == "ece" else 2)
        if metric in FOLDED_METRICS:  # ECE: calibration, lower is better
            b.add(f"<details><summary>{heading}</summary>{html}</details>")
        else:
            b.add(f"<h3>{heading}</h3>{html}")
    if split == "target":
        try:
            src = collect_rows([exp.root], "source_mean")
        except Exception:  # runs without source evaluation
            src = []
        src = [r for r in src if r.metrics.get("accuracy") == r.metrics.get("accuracy")]
        if src:
            table = _ordered(build_table(src, metric="accuracy"), methods)
            b.add(
                "<h3>accuracy (%) on the sources' own test splits (mean), beside "
                "the unseen domain's</h3>"
            )
            b.add(result_table(table, worst=False, key="source accuracy"))
        for select, what, key in (
            ("selected", "round selected on the sources' validation slides",
             "selected round"),
            ("averaged", "weights averaged over the last rounds "
             "(evaluation.swa_from)", "averaged weights"),
        ):  # fmt: skip
            if all(
                select in (r.final or {}).get("evaluation", {}) for r in exp.finished
            ):
                rows = collect_rows([exp.root], "target", select)
                table = _ordered(build_table(rows, metric="balanced_accuracy"), methods)
                b.add(f"<h3>balanced_accuracy (%) at the unseen domain, {what}</h3>")
                b.add(result_table(table, key=f"balanced_accuracy ({key})"))
        _adapted_table(b, exp, methods)


def _adapted_table(b: Builder, exp: Experiment, methods: list[str]) -> None:
    """The unseen domain with BatchNorm adapted to it (``evaluation.adapt_bn``),
    beside, never instead of, the plain table; only runs that recorded it."""
    from fedpath.evaluation.tables import build_table
    from fedpath.runtime.experiment import collect_rows

    blocks = [
        (r.final or {}).get("evaluation", {}).get("adapted", {}) for r in exp.finished
    ]
    if not any(a.get("target") for a in blocks):  # no run recorded it
        return
    rows = [r for r in collect_rows([exp.root], "adapted") if r.method in methods]
    rows = [r for r in rows if isinstance(r.metrics.get("balanced_accuracy"), float)]
    if not rows:
        return
    on = sorted({str(a.get("on")) for a in blocks if a})
    table = _ordered(build_table(rows, metric="balanced_accuracy"), methods)
    b.add(
        "<h3>balanced_accuracy (%) at the unseen domain, BatchNorm adapted to its "
        "unlabelled images</h3>"
        f'<p class="note">Test-time BatchNorm adaptation (evaluation.adapt_bn): '
        f"running statistics re-estimated on the target's images "
        f"({esc(', '.join(on))}); no label is read and no weight is trained. "
        f"{len(rows)} of {len(exp.finished)} runs recorded it.</p>"
    )
    b.add(result_table(table, key="balanced_accuracy (BatchNorm adapted)"))


def _ordered(table: Any, methods: list[str]) -> Any:
    """``table`` with its rows in the experiment's method order."""
    import numpy as np

    from fedpath.evaluation.tables import ResultTable

    order = [table.methods.index(m) for m in methods if m in table.methods]
    return ResultTable(
        table.metric,
        [table.methods[i] for i in order],
        table.targets,
        np.asarray(table.mean)[order],
        np.asarray(table.std)[order],
        np.asarray(table.n_seeds)[order],
    )
