"""The report's assembly: one section per experiment (see :mod:`fedpath.report`)."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpath.report.html import esc, img, page, result_table
from fedpath.report.runs import Experiment, Run, find_experiments

#: the metrics a table is drawn for, where the runs have them
TABLE_METRICS = ("balanced_accuracy", "accuracy", "auroc", "f1", "ece")
#: the tables shown folded (under "more metrics"), after the first three
FOLDED_METRICS = ("f1", "ece")


@dataclass
class ReportInfo:
    """What was written: the file, its figures, what could not be drawn, time."""

    path: Path
    figures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class _Builder:
    per_domain: int
    seed: int
    figures: bool
    info: ReportInfo
    body: list[str] = field(default_factory=list)

    def add(self, html: str) -> None:
        self.body.append(html)

    def figure(self, name: str, title: str, draw: Callable[[], bytes | None]) -> None:
        """Draw one figure; a failure (data not here, a model without a
        convolution...) becomes a note instead of an error."""
        try:
            png = draw()
        except Exception as err:  # the page is written anyway
            self.info.skipped.append(f"{name}: {err}")
            self.add(f'<p class="note">{esc(title)}: not drawn ({esc(err)}).</p>')
            return
        if png is None:
            return
        self.info.figures.append(name)
        self.add(f"<h3>{esc(title)}</h3>" + img(png, title))


def write_report(
    paths: Sequence[Path],
    out: Path,
    figures: bool = True,
    per_domain: int = 60,
    seed: int = 0,
    title: str | None = None,
) -> ReportInfo:
    """Write the report of every run under ``paths`` to ``out`` (HTML).

    ``figures=False`` leaves out the figures that need models and images (t-SNE,
    Grad-CAM, stain statistics, augmentations); ``per_domain``: test images per
    domain for them; ``seed``: which images and the t-SNE's random state.
    """
    from fedpath import __version__
    from fedpath.utils.io import atomic_write_text

    t0 = time.perf_counter()
    experiments = find_experiments(list(paths))
    info = ReportInfo(out)
    b = _Builder(per_domain, seed, figures, info)
    heading = title or "fedpath report"
    b.add(f"<h1>{esc(heading)}</h1>")
    b.add(
        f'<p class="note">{len(experiments)} experiment(s), '
        f"{sum(len(e.runs) for e in experiments)} run(s) under "
        f"{esc(', '.join(map(str, paths)))}; written by fedpath {esc(__version__)} "
        f"on {time.strftime('%Y-%m-%d %H:%M')}. Numbers are percentages (mean ± "
        "standard deviation over seeds) unless said otherwise.</p>"
    )
    for exp in experiments:
        _experiment(b, exp)
    atomic_write_text(out, page(heading, b.body))
    info.seconds = time.perf_counter() - t0
    return info


# ------------------------------------------------------------------ sections


def _experiment(b: _Builder, exp: Experiment) -> None:
    targets = sorted({r.target for r in exp.runs})
    seeds = sorted({r.seed for r in exp.runs})
    b.add(f"<h2>{esc(exp.root.name)}</h2>")
    what = {
        "classifier": "each held-out domain (hospital / scanner) is unseen in "
        "training; the table gives the global model's score there",
        "linear_probe": "self-supervised pre-training; a linear probe on the "
        "held-out domain's frozen features scores the encoder",
        "local": "each client trains its own model; the table gives each client's "
        "score on its own test slides",
    }.get(exp.protocol, exp.protocol)
    b.add(
        f"<p>{len(exp.methods)} method(s) ({esc(', '.join(exp.methods))}) x "
        f"{len(targets)} held-out domain(s) x {len(seeds)} seed(s) "
        f"({len(exp.finished)} of {len(exp.runs)} runs finished): {esc(what)}.</p>"
    )
    _identity(b, exp, seeds)
    _tables(b, exp)
    _curves(b, exp)
    if exp.protocol == "linear_probe":
        _fedad(b, exp)
    if b.figures and _holds_images(exp):
        _data_figures(b, exp)
        _model_figures(b, exp)
    for png in sorted(exp.root.glob("*.png")):  # e.g. fedpath fedhd-render --out
        b.info.figures.append(png.name)
        b.add(f"<h3>{esc(png.name)}</h3>" + img(png.read_bytes(), png.name))


def _holds_images(exp: Experiment) -> bool:
    """Whether the experiment's data are images (not slide bags or features);
    False, with a note later, where the data cannot be loaded here."""
    from fedpath.report.samples import run_dataset

    try:
        ds = run_dataset(exp.runs[0])
    except Exception:  # the figures say why, one by one
        return True
    return bool(ds.kind == "images")


def _identity(b: _Builder, exp: Experiment, seeds: list[int]) -> None:
    first = exp.runs[0]
    model = first.config.get("model", {})
    versions = sorted({str((r.final or {}).get("fedpath", "?")) for r in exp.runs})
    hashes = sorted({str((r.final or {}).get("config_hash", "")) for r in exp.finished})
    weights = ""
    if first.model_file is not None:
        from fedpath.artifact import read_model_file

        try:
            meta, _ = read_model_file(first.model_file)
            weights = (
                f"{meta.weights_source or 'random init / local'} "
                f"sha256 {meta.weights_sha256 or '-'}"
            )
        except Exception as err:
            weights = f"model file unreadable: {err}"
    rows = [
        ("seeds", ", ".join(map(str, seeds))),
        (
            "data",
            f"{first.config.get('data', {}).get('name')} "
            f"{json.dumps(first.config.get('data', {}).get('params', {}))}",
        ),
        ("encoder", f"{model.get('backbone')} {json.dumps(model.get('params', {}))}"),
        ("encoder weights", weights or "-"),
        (
            "rounds x local epochs",
            f"{first.config.get('train', {}).get('rounds')} x "
            f"{first.config.get('train', {}).get('local_epochs')}",
        ),
        ("fedpath version", ", ".join(versions)),
        ("config hashes", ", ".join(h for h in hashes if h) or "-"),
    ]
    b.add(
        '<table class="identity">'
        + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
        + "</table>"
    )
    import yaml

    folded = []
    for method in exp.methods:
        run = next(r for r in exp.runs if r.method == method)
        folded.append(
            f"<details><summary>resolved config of {esc(method)}</summary>"
            f"<pre>{esc(yaml.safe_dump(run.config, sort_keys=False))}</pre></details>"
        )
    b.add('<div class="configs">' + "".join(folded) + "</div>")


def _tables(b: _Builder, exp: Experiment) -> None:
    from fedpath.evaluation.tables import build_table
    from fedpath.runtime.experiment import collect_rows

    if not exp.finished:
        b.add('<p class="note">No finished run yet: no table.</p>')
        return
    methods = exp.methods
    split = "clients" if exp.per_client else "target"
    rows = [r for r in collect_rows([exp.root], split) if r.method in methods]
    label = {
        "target": "at the unseen domain",
        "clients": "on each client's own test slides (clients x methods)",
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


def _adapted_table(b: _Builder, exp: Experiment, methods: list[str]) -> None:
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


def _curves(b: _Builder, exp: Experiment) -> None:
    from fedpath.report.fig_curves import collect_curves, plot_curves

    b.figure(
        "curves",
        "per-round curves (mean over each method's runs)",
        lambda: plot_curves(collect_curves(exp.runs)),
    )


def _fedad(b: _Builder, exp: Experiment) -> None:
    from fedpath.ssl.plots import plot_ssl

    def draw() -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "ssl.png"
            plot_ssl([r.path for r in exp.runs], out)
            return out.read_bytes()

    b.figure("fedad", "FedAD: loss terms and the ATSA trace (Delta_t, lambda_t)", draw)
    shown = [r for r in (exp.first_run_any(m) for m in exp.methods) if r is not None]

    def target(run: Run) -> dict[str, Any]:
        return dict((run.final or {}).get("evaluation", {}).get("target", {}))

    def roc() -> bytes | None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from fedpath.report.html import fig_png

        curves = [(r, target(r)["roc"]) for r in shown if "roc" in target(r)]
        if not curves:
            return None
        fig, ax = plt.subplots(figsize=(5, 4.5))
        for run, pts in curves:
            auc = target(run).get("auroc")
            label = f"{run.method} (AUROC {100 * auc:.1f})" if auc else run.method
            ax.plot(pts["fpr"], pts["tpr"], marker=".", label=label)
        ax.plot([0, 1], [0, 1], "k:", lw=0.8)
        ax.set(xlabel="false positive rate", ylabel="true positive rate")
        ax.set_title(
            f"linear probe at {curves[0][0].target} (seed {curves[0][0].seed})"
        )
        ax.legend(fontsize=8)
        fig.tight_layout()
        return fig_png(fig)

    b.figure("probe_roc", "the linear probe's ROC at the unseen domain", roc)
    for run in shown:
        cm = target(run).get("confusion")
        if cm is None:
            continue
        rows = "".join(
            "<tr>" + "".join(f'<td class="num">{esc(v)}</td>' for v in row) + "</tr>"
            for row in cm
        )
        b.add(
            f"<p>probe confusion matrix, {esc(run.method)} -> {esc(run.target)} "
            f"(seed {run.seed}; rows: true class, columns: predicted)</p>"
            f'<table class="results"><tbody>{rows}</tbody></table>'
        )


def _data_figures(b: _Builder, exp: Experiment) -> None:
    from fedpath.report.samples import run_dataset

    def stain() -> bytes:
        from fedpath.stain.analysis import analyse, stain_figure

        ds = run_dataset(exp.runs[0])
        rows, samples = analyse(ds, "gray", images=min(200, 4 * b.per_domain))
        name = exp.runs[0].config["data"]["name"]
        return stain_figure(rows, samples, f"{name}: gray intensity", "gray")

    b.figure(
        "stain", "stain statistics of the data, per domain (FedStain Fig. 3)", stain
    )
    if not any(
        r.config.get("algorithm", {}).get("name") == "fedstain" for r in exp.runs
    ):
        return

    def augment() -> bytes:
        import torch

        from fedpath.report.fig_augment import augmentation_png
        from fedpath.report.samples import run_samples

        s = run_samples(exp.runs[0], b.per_domain, b.seed)
        src = torch.from_numpy((~s.unseen).nonzero()[0])
        x = s.images[src].float() / 255.0
        rows, pool = x[:4], x[4:68]
        return augmentation_png(rows, pool, b.seed)

    b.figure(
        "augment", "FedStain's augmentations on real patches of the sources", augment
    )


def _model_figures(b: _Builder, exp: Experiment) -> None:
    from fedpath.artifact import load_model
    from fedpath.report.fig_gradcam import cam_panel, plot_gradcam
    from fedpath.report.fig_tsne import embed, plot_tsne
    from fedpath.report.samples import run_samples

    picked: list[tuple[str, Run]] = []
    for method in exp.methods:
        run = exp.first_run(method)
        if run is not None:
            picked.append((method, run))
    if not picked:
        return
    where = f"{picked[0][1].target} held out, seed {picked[0][1].seed}"
    cache: dict[str, Any] = {}

    def loaded(run: Run) -> Any:
        if str(run.path) not in cache:
            assert run.model_file is not None
            cache[str(run.path)] = load_model(run.model_file)
        return cache[str(run.path)]

    images: dict[str, Any] = {}

    def samples(run: Run) -> Any:  # the same images for t-SNE and Grad-CAM
        if str(run.path) not in images:
            images[str(run.path)] = run_samples(run, b.per_domain, b.seed)
        return images[str(run.path)]

    b.figure(
        "tsne",
        f"t-SNE of the encoder's embeddings ({where}; x: the unseen domain)",
        lambda: plot_tsne([embed(m, loaded(r), samples(r), b.seed) for m, r in picked]),
    )
    b.figure(
        "gradcam",
        f"Grad-CAM on unseen-domain patches ({where}; green: right, red: wrong)",
        lambda: plot_gradcam(
            [cam_panel(m, loaded(r), samples(r), 3, b.seed) for m, r in picked]
        ),
    )
