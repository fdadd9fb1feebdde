"""Training-dynamics figures of the self-supervised runs (FedAD Figures 7-11).

Read from the runs' ``results.jsonl`` round records (nothing is recomputed):

* training loss per method and round (``fit/loss``; FedAD Fig. 7, log scale);
* the loss components (``fit/cl``, ``fit/align``, ``fit/ortho``, ...; Fig. 8) of
  the methods that log them;
* the ATSA trace: instability Delta_t (``fit/delta``) and alignment weight
  lambda_t (``fit/lambda``) per round (Figs. 9-11).

Several runs of one method (seeds, targets) are averaged per round.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedpath.config import ConfigError
from fedpath.utils.io import read_json_lines

RESULTS = "results.jsonl"
#: round-record keys that are not loss components (the ATSA controller's trace)
NOT_COMPONENTS = {
    "fit/loss",
    "fit/delta",
    "fit/delta_ref",
    "fit/delta_norm",
    "fit/lambda",
    "fit/lambda_target",
    "fit/lambda_next",
    "fit/num_examples",
    "fit/bank_entries",
}

Curves = dict[str, dict[str, list[tuple[int, float]]]]  # method -> key -> points


def find_results(paths: Iterable[Path]) -> list[Path]:
    """``results.jsonl`` files at or below each path (a file, a run, a suite)."""
    found: list[Path] = []
    for p in paths:
        if p.is_file():
            found.append(p)
        elif p.is_dir():
            found.extend(sorted(p.rglob(RESULTS)))
        else:
            raise ConfigError(f"plot-ssl: {str(p)!r} does not exist")
    if not found:
        raise ConfigError(
            f"plot-ssl: no {RESULTS} under {', '.join(str(p) for p in paths)}"
        )
    return found


def collect(paths: Iterable[Path]) -> Curves:
    """Per method, per ``fit/*`` key: (round, mean over runs) points, by round."""
    sums: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for path in find_results(paths):
        for rec in read_json_lines(path, "run record").records:
            if rec.get("kind") != "round":
                continue
            method, rnd = str(rec.get("method", path.parent.name)), int(rec["round"])
            for k, v in rec.items():
                if k.startswith("fit/") and isinstance(v, int | float):
                    sums[method][k][rnd].append(float(v))
    return {
        m: {
            k: [(r, float(np.mean(v))) for r, v in sorted(by_round.items())]
            for k, by_round in keys.items()
        }
        for m, keys in sums.items()
    }


def _protocol(results: Path) -> str | None:
    """The run's ``evaluation.protocol`` from its ``config.yaml`` (None: none)."""
    cfg = results.parent / "config.yaml"
    if not cfg.is_file():
        return None
    import yaml

    raw = yaml.safe_load(cfg.read_text()) or {}
    return str(raw.get("evaluation", {}).get("protocol", "classifier"))


def _xy(points: Sequence[tuple[int, float]]) -> tuple[list[int], list[float]]:
    return [p[0] for p in points], [p[1] for p in points]


def plot_ssl(paths: Sequence[Path], out: Path, title: str | None = None) -> Path:
    """Write the three-panel figure to ``out`` (PNG); return ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    supervised = [
        f for f in find_results(paths) if _protocol(f) not in (None, "linear_probe")
    ]
    if supervised and len(supervised) == len(find_results(paths)):
        raise ConfigError(
            f"plot-ssl draws self-supervised runs (FedAD and its baselines); "
            f"{supervised[0].parent} is a supervised run (evaluation.protocol: "
            f"{_protocol(supervised[0])}): `fedpath report {supervised[0].parent} "
            "--out report.html` shows its curves"
        )
    curves = collect(paths)
    if not any("fit/loss" in c for c in curves.values()):
        raise ConfigError("plot-ssl: the runs have no round records with fit/loss")
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    ax = axes[0]
    for method, keys in sorted(curves.items()):
        if "fit/loss" in keys:
            ax.plot(*_xy(keys["fit/loss"]), marker="o", ms=3, label=method)
    ax.set(xlabel="round", ylabel="training loss", title="training loss per method")
    if all(v > 0 for k in curves.values() for _, v in k.get("fit/loss", [])):
        ax.set_yscale("log")
    ax.legend(fontsize=8)

    ax = axes[1]
    atsa = [m for m, k in curves.items() if "fit/lambda" in k] or list(curves)
    styles = ["-", "--", ":", "-."]
    for i, method in enumerate(sorted(atsa)):
        for k, pts in sorted(curves[method].items()):
            if k in NOT_COMPONENTS or k.endswith("_raw"):
                continue
            ls = styles[i % len(styles)]
            ax.plot(*_xy(pts), ls=ls, marker=".", label=f"{method}: {k[4:]}")
    ax.set(xlabel="round", ylabel="loss component", title="loss components")
    ax.legend(fontsize=7)

    ax = axes[2]
    twin = ax.twinx()
    traces = (  # Delta_t on the left axis, lambda_t on the right one
        (ax, "fit/delta", "tab:orange", "o", "Delta"),
        (twin, "fit/lambda", "tab:blue", "s", "lambda"),
    )
    for i, method in enumerate(
        sorted(m for m, k in curves.items() if "fit/delta" in k)
    ):
        for axis, key, color, marker, name in traces:
            if key in curves[method]:
                axis.plot(
                    *_xy(curves[method][key]),
                    ls=styles[i % len(styles)],
                    color=color,
                    marker=marker,
                    ms=3,
                    label=f"{method}: {name}",
                )
    ax.set(xlabel="round", title="ATSA: instability and alignment weight")
    ax.set_ylabel("instability Delta_t (Eq. 5)", color="tab:orange")
    twin.set_ylabel("alignment weight lambda_t (Eq. 6)", color="tab:blue")
    handles = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    if handles[0] or more[0]:
        ax.legend(handles[0] + more[0], handles[1] + more[1], fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp{out.suffix or '.png'}")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(out)
    return out


def summary(curves: Curves) -> dict[str, Any]:
    """Last-round values per method and key (for printing)."""
    return {m: {k: pts[-1][1] for k, pts in keys.items()} for m, keys in curves.items()}
