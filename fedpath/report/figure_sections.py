"""The report's figures of one experiment: per-round curves, FedAD's loss terms,
ATSA trace and linear probe, the data's stain statistics and FedStain's
augmentations, and the encoders' t-SNE and Grad-CAM.

Each figure goes through :meth:`~fedpath.report.builder.Builder.figure`: one
that cannot be drawn here becomes a note, and the page is written anyway.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from fedpath.report.builder import Builder
from fedpath.report.html import esc
from fedpath.report.runs import Experiment, Run


def curves(b: Builder, exp: Experiment) -> None:
    from fedpath.report.fig_curves import collect_curves, plot_curves

    b.figure(
        "curves",
        "per-round curves (mean over each method's runs)",
        lambda: plot_curves(collect_curves(exp.runs)),
    )


def fedad(b: Builder, exp: Experiment) -> None:
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


def data_figures(b: Builder, exp: Experiment) -> None:
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


def model_figures(b: Builder, exp: Experiment) -> None:
    from fedpath.loading import load_model
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
