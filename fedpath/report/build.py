"""The report's assembly: one section per experiment (see :mod:`fedpath.report`).

A section is the experiment's heading and identity (here), its tables
(:mod:`~fedpath.report.table_sections`) and its figures
(:mod:`~fedpath.report.figure_sections`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from fedpath.report.builder import Builder, ReportInfo
from fedpath.report.figure_sections import curves, data_figures, fedad, model_figures
from fedpath.report.html import esc, img, page
from fedpath.report.runs import Experiment, find_experiments
from fedpath.report.table_sections import tables


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
    from fedpath.utils.io import atomic_write_text
    from fedpath.version import __version__

    t0 = time.perf_counter()
    experiments = find_experiments(list(paths))
    info = ReportInfo(out)
    b = Builder(per_domain, seed, figures, info)
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


def _experiment(b: Builder, exp: Experiment) -> None:
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
    tables(b, exp)
    curves(b, exp)
    if exp.protocol == "linear_probe":
        fedad(b, exp)
    if b.figures and _holds_images(exp):
        data_figures(b, exp)
        model_figures(b, exp)
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


def _identity(b: Builder, exp: Experiment, seeds: list[int]) -> None:
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
