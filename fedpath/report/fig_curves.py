"""Per-round curves of a group of runs, from their ``results.jsonl`` only.

Panels (each drawn when the runs logged it): training loss; its components
(every other numeric ``fit/*`` key: SupCon, JS, align, ortho...); accuracy and
balanced accuracy at the unseen domain and on the sources' test splits; each
client's own metric (``evaluation.protocol: local``); the learning rate; bytes
up and down per round (per client from ``traffic.jsonl`` where it was kept).
Several runs of one method (targets, seeds) are averaged per round.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedpath.report.runs import Run
from fedpath.ssl.plots import NOT_COMPONENTS as SSL_NOT_COMPONENTS

#: ``fit/*`` keys that are not loss components: plot-ssl's (ATSA's trace and
#: counters), the learning rate and DP's epsilon
NOT_COMPONENTS = SSL_NOT_COMPONENTS | {"fit/lr", "fit/epsilon"}
Series = dict[str, dict[str, list[tuple[int, float]]]]  # method -> curve -> points


def _mean_by_round(points: dict[int, list[float]]) -> list[tuple[int, float]]:
    return [(r, float(np.mean(v))) for r, v in sorted(points.items())]


def collect_curves(runs: Sequence[Run]) -> Series:
    """Per method: ``loss``, ``component:<k>``, ``lr``, ``target:<metric>``,
    ``source:<metric>``, ``client:<id>``, ``bytes_up``, ``bytes_down``,
    ``up:<client>`` / ``down:<client>``; each a list of (round, mean over runs)."""
    acc: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for run in runs:
        m = acc[run.method]
        per_run: dict[str, dict[int, list[float]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for rec in run.records:
            rnd = int(rec.get("round", 0))
            kind = rec.get("kind")
            if kind == "round":
                for k, v in rec.items():
                    if not isinstance(v, int | float) or isinstance(v, bool):
                        continue
                    if k == "fit/loss":
                        m["loss"][rnd].append(float(v))
                    elif k == "fit/lr":
                        m["lr"][rnd].append(float(v))
                    elif k in ("bytes_up", "bytes_down"):
                        m[k][rnd].append(float(v))
                    elif k.startswith("fit/") and k not in NOT_COMPONENTS:
                        m[f"component:{k[4:]}"][rnd].append(float(v))
            elif kind == "eval":
                split = rec.get("split")
                for metric in ("accuracy", "balanced_accuracy", "f1"):
                    v = rec.get(metric)
                    if not isinstance(v, int | float):
                        continue
                    if split == "target":
                        m[f"target:{metric}"][rnd].append(float(v))
                    elif split == "source":  # averaged over domains, then runs
                        per_run[f"source:{metric}"][rnd].append(float(v))
                    elif split == "client" and metric == "balanced_accuracy":
                        m[f"client:{rec.get('domain')}"][rnd].append(float(v))
        for key, by_round in per_run.items():
            for rnd, values in by_round.items():
                m[key][rnd].append(float(np.mean(values)))
        sent: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        for t in run.traffic():  # [group, name, dtype, shape, bytes] per array
            rnd, cid = int(t.get("round", 0)), str(t.get("client", "?"))
            for direction, field in (("up", "sent"), ("down", "received")):
                arrays = t.get(field) or []
                sent[f"{direction}:{cid}"][rnd] += float(sum(a[4] for a in arrays))
        for key, totals in sent.items():
            for rnd, total in totals.items():
                m[key][rnd].append(total)
    return {
        method: {k: _mean_by_round(v) for k, v in curves.items()}
        for method, curves in acc.items()
    }


def _panels(series: Series) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(title, y label, [(method, curve key)...]) of each panel with data."""
    keys = {k for curves in series.values() for k in curves}
    out: list[tuple[str, str, list[tuple[str, str]]]] = []

    def add(title: str, ylabel: str, pick: Any) -> None:
        lines = [
            (m, k) for m, curves in series.items() for k in sorted(curves) if pick(k)
        ]
        if lines:
            out.append((title, ylabel, lines))

    add("training loss", "loss", lambda k: k == "loss")
    add("loss components", "value", lambda k: k.startswith("component:"))
    if any(k.startswith("target:") for k in keys):
        add("unseen domain", "%", lambda k: k.startswith("target:") and "f1" not in k)
    add(
        "sources' test splits (mean)",
        "%",
        lambda k: k.startswith("source:") and "f1" not in k,
    )
    add(
        "each client's own test split",
        "balanced accuracy %",
        lambda k: k.startswith("client:"),
    )
    add("learning rate", "lr", lambda k: k == "lr")
    add("bytes per round", "bytes", lambda k: k in ("bytes_up", "bytes_down"))
    add("bytes per client and round", "bytes", lambda k: k[:3] in ("up:", "dow"))
    return out


def plot_curves(series: Series, title: str = "") -> bytes | None:
    """The panels of :func:`collect_curves` as one PNG (None: nothing logged)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from fedpath.report.html import fig_png

    panels = _panels(series)
    if not panels:
        return None
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(
        rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False
    )
    styles = ["-", "--", ":", "-."]
    methods = list(series)
    for ax, (ptitle, ylabel, lines) in zip(axes.ravel(), panels, strict=False):
        for method, key in lines:
            pts = series[method][key]
            scale = 100.0 if ylabel.endswith("%") else 1.0
            label = method if ":" not in key else f"{method}: {key.split(':', 1)[1]}"
            ax.plot(
                [p[0] for p in pts],
                [p[1] * scale for p in pts],
                ls=styles[methods.index(method) % len(styles)],
                marker=".",
                label=label,
            )
        ax.set(title=ptitle, xlabel="round", ylabel=ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ptitle.startswith("bytes"):
            ax.set_yscale("log")
        if len(lines) <= 12:  # more (clients x methods): the lines speak alone
            ax.legend(fontsize=7)
    for ax in axes.ravel()[len(panels) :]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig_png(fig)
