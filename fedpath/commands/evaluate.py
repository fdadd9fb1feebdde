"""``fedpath evaluate MODEL DATA``: an exported model (image or MIL) scored on any
readable dataset, with bootstrap intervals, per-class rates and the confusion
matrix."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from fedpath.commands.common import SKIP_BAD_HELP, add_common
from fedpath.utils.cli_args import SubParsers, add_overrides, int_at_least

if TYPE_CHECKING:
    from fedpath.inference.opening import EvalData

DESCRIPTION = (
    "DATA is a manifest CSV (path,label,domain[,slide]), a folder of "
    "<class>/ or <domain>/<class>/ image folders, or NAME[:DOMAIN,...] for a "
    "registered dataset: NAME:DOMAIN is rebuilt with the data settings of the "
    "model's run (recorded in model.fpm; data.* key=value overrides change them, "
    "--config replaces them). Class folders (and manifest labels) match the "
    "model's classes case-insensitively; --class-map maps other names. Prints "
    "accuracy, balanced accuracy, macro-F1, AUROC, MCC with bootstrap 95% "
    "intervals of the balanced accuracy and AUROC, per-class sensitivity and "
    "specificity, and the confusion matrix (rows: true class, columns: predicted "
    "class). A MIL model (models/<client>.fpm of a slide-bag run) takes slide "
    "bags (.h5/.pt): DATA is a labels CSV (slide_id,label[,domain][,path]; bag "
    "files found beside it or in its h5_files/, pt_files/), a folder holding "
    "one as slides.csv, a folder of <class>/ folders of bag files, or "
    "NAME[:DOMAIN,...] for a registered bag dataset (e.g. "
    "synthetic_bags:hospital_1 --split test)."
)
#: The metrics of a report's first table (and, but AUROC, of the operating point's).
NAMES = ("accuracy", "balanced_accuracy", "macro_f1", "auroc", "mcc")


def register(sub: SubParsers) -> None:
    """Add ``evaluate`` to ``sub``."""
    ev = sub.add_parser(
        "evaluate",
        help="evaluate an exported model (model.fpm) on any readable dataset",
        description=DESCRIPTION,
    )
    ev.add_argument(
        "model",
        type=Path,
        help="model file written by a run (model.fpm, or models/<client>.fpm of a "
        "slide-bag run)",
    )
    ev.add_argument(
        "data",
        help="manifest .csv, image folder, or NAME[:DOMAIN,...]; for a MIL model a "
        "slide labels .csv, a folder of bags, or NAME[:DOMAIN,...]",
    )
    add_overrides(ev, "config overrides for a registered dataset")
    ev.add_argument(
        "--config", type=Path, help="experiment YAML for a registered dataset"
    )
    ev.add_argument("--per-domain", action="store_true", help="also report per domain")
    ev.add_argument("--out", type=Path, help="write the metrics as JSON")
    ev.add_argument("--skip-bad", action="store_true", help=SKIP_BAD_HELP)
    ev.add_argument(
        "--class-map",
        metavar="FOLDER=CLASS,...",
        help="map class folder names (or manifest labels, or a registered dataset's "
        "classes) to the model's classes, e.g. Mitosis=atypical,Normal=normal; "
        "names not listed match a class of the same name in any case",
    )
    _add_scoring(ev)
    add_common(ev)


def _add_scoring(ev: argparse.ArgumentParser) -> None:
    """Which part of the data is scored, and the bootstrap's resamples and seed."""
    ev.add_argument(
        "--split",
        default="all",
        choices=["all", "test", "train"],
        help="which part of a registered dataset to score (NAME:DOMAIN): every "
        "image, or its test (train) split; a folder or manifest is scored whole",
    )
    ev.add_argument(
        "--bootstrap",
        type=int_at_least(0),
        default=1000,
        metavar="N",
        help="resamples of the images for the 95%% confidence intervals of the "
        "balanced accuracy and AUROC (percentiles 2.5 and 97.5); 0: none",
    )
    ev.add_argument(
        "--seed",
        type=int_at_least(0),
        default=0,
        help="seed of the bootstrap resampling (the same seed, the same intervals)",
    )


def run(args: argparse.Namespace) -> int:
    """Score the model on the data, print the reports, write ``--out``."""
    from fedpath.artifact import LoadedModel
    from fedpath.inference import evaluate, open_data, parse_class_map
    from fedpath.loading import load_model
    from fedpath.utils.io import atomic_write_text, check_output_file, dumps_json

    if args.out:
        check_output_file(args.out, "--out")
    model = load_model(args.model)  # an image model, or a MIL model of slide bags
    unit = "images" if isinstance(model, LoadedModel) else "slides"
    class_map = parse_class_map(args.class_map, model.class_names)
    opened = open_data(
        args.data,
        model,
        args.config,
        args.overrides,
        args.skip_bad,
        class_map,
        args.split,
    )
    ds = opened.dataset
    result = evaluate(
        model,
        ds,
        opened.domains,
        per_domain=args.per_domain,
        split=args.split,
        bootstrap=args.bootstrap,
        seed=args.seed,
    )
    result["model"] = str(args.model)
    result["data"] = args.data
    if opened.settings is not None:
        result["data_settings"] = opened.settings
    if opened.renamed:
        result["class_map"] = opened.renamed
    if opened.warnings:
        result["warnings"] = opened.warnings
    result["skipped"] = ds.skipped
    console = Console(soft_wrap=True)
    if not isinstance(model, LoadedModel):
        m = model.meta
        console.print(
            f"MIL model {m.architecture} of client {m.client or '?'} ({m.method}, "
            f"seed {m.seed}): bags of D={m.in_dim}, embedding space "
            f"{m.embedding_space!r}",
            highlight=False,
            markup=False,
        )
    _print_data(console, opened)
    part = "" if args.split == "all" else f" ({args.split} split)"
    _print_metrics(console, f"all{part}", result, model.class_names, unit)
    expected = getattr(model.meta, "expected", None)  # a consortium image model
    if expected:
        result["expected"] = expected
        console.print(expected_line(expected, result), highlight=False, markup=False)
    for d, dm in result.get("per_domain", {}).items():
        _print_metrics(console, f"{d}{part}", dm, model.class_names, unit)
    if ds.skipped:
        bad = "bag files" if unit == "slides" else "images"
        console.print(f"skipped {len(ds.skipped)} unreadable {bad} (--skip-bad)")
    if args.out:
        atomic_write_text(args.out, dumps_json(result, indent=2))
    return 0


def _header_num(v: object) -> str:
    """A header number at 4 decimals; ``n/a`` for anything else (the header's
    dicts are not typed inside)."""
    ok = isinstance(v, int | float) and not isinstance(v, bool)
    return f"{v:.4f}" if ok else "n/a"


def expected_estimate(expected: Mapping[str, Any]) -> str:
    """What a consortium model file expects at a new site (its ``expected``
    entry: the leave-one-hospital-out runs of its recipe), in one phrase
    (``evaluate`` and ``info`` print it)."""
    lo, hi = _header_num(expected.get("min")), _header_num(expected.get("max"))
    return (
        f"expected at a new site from leave-one-hospital-out: "
        f"{_header_num(expected.get('mean'))} [{lo}, {hi}] over "
        f"{expected.get('hospitals', '?')} hospitals"
    )


def expected_point(expected: Mapping[str, Any], measured: Mapping | None = None) -> str:
    """How the operating point held at the leave-one-out runs' held-out
    hospitals (``expected['operating_point']``), beside the sensitivity and
    specificity ``measured`` here at the model's threshold when given; "" when
    the file carries none."""
    point = expected.get("operating_point")
    if not isinstance(point, Mapping):
        return ""
    here = (measured or {}).get("operating_point") or {}
    parts = []
    for name in ("sensitivity", "specificity"):
        e = point.get(name, {})
        lo, hi = _header_num(e.get("min")), _header_num(e.get("max"))
        at = f" measured here {_header_num(here[name])}," if name in here else ""
        parts.append(f"{name}{at} expected {_header_num(e.get('mean'))} [{lo}, {hi}]")
    return (
        f"at the operating point ({_header_num(point.get('target_sensitivity'))} "
        f"sensitivity on validation): {'; '.join(parts)}"
    )


def expected_line(expected: dict, measured: dict) -> str:
    """:func:`expected_estimate` beside what was measured here (``measured``:
    the report of all the data), and :func:`expected_point` below it."""
    here = _header_num(measured.get("balanced_accuracy"))
    line = f"balanced_accuracy measured here {here}; {expected_estimate(expected)}"
    point = expected_point(expected, measured)
    return f"{line}\n{point}" if point else line


def _print_data(console: Console, opened: EvalData) -> None:
    """The warnings about the data, where its settings came from, and how its
    class names were matched to the model's."""
    for text in opened.warnings:
        Console(stderr=True).print(f"warning: {text}", highlight=False, markup=False)
    if opened.settings is not None:
        s = opened.settings
        params = ", ".join(f"{k}={v}" for k, v in s["params"].items())
        root = f", root {s['root']}" if s["root"] else ""
        console.print(
            f"data {s['name']}{root} ({params}): settings from {s['source']}",
            highlight=False,
            markup=False,
        )
    if opened.renamed:
        matched = ", ".join(f"{k} -> {v}" for k, v in opened.renamed.items())
        console.print(f"classes matched: {matched}", highlight=False, markup=False)


def _num(v: float) -> str:
    return "n/a" if v != v else f"{v:.4f}"  # nan: undefined


def _print_metrics(
    console: Console, title: str, m: dict, classes: list[str], unit: str = "images"
) -> None:
    """One report of :func:`fedpath.inference.evaluate`: the metrics, their
    bootstrap intervals, per-class sensitivity and specificity, the operating
    point's metrics, and the confusion matrix with the class names; ``unit``
    names what was scored (``images``, or ``slides`` for a MIL model)."""
    from rich.table import Table  # on use: `fedpath --help` stays light

    table = Table(title=f"{escape(title)}: {m['n']} {unit}", show_header=True)
    for name in NAMES:
        table.add_column(name)
    table.add_row(*(_num(m[k]) for k in NAMES))
    console.print(table)
    bs = m.get("bootstrap")
    if bs is not None:

        def ci(lo: float, hi: float) -> str:
            return "n/a (one class)" if lo != lo else f"{lo:.4f}-{hi:.4f}"

        console.print(
            f"{100 * bs['level']:.0f}% bootstrap CI ({bs['resamples']} resamples of "
            f"the {unit}, seed {bs['seed']}): balanced_accuracy "
            f"{ci(*bs['balanced_accuracy'])}, auroc {ci(*bs['auroc'])}",
            highlight=False,
        )
    if "temperature" in m:
        console.print(
            f"probabilities scaled by the model's temperature {m['temperature']:.4f}"
        )
    _print_per_class(console, m)
    _print_confusion(console, m, classes)


def _print_per_class(console: Console, m: dict) -> None:
    """Each class's sensitivity and specificity, and the operating point's metrics."""
    from rich.table import Table

    per_class = m.get("per_class")
    if per_class is not None:
        console.print(
            "per class, one vs the rest: sensitivity (recall) = TP/(TP+FN), "
            "specificity = TN/(TN+FP)",
            highlight=False,
        )
        pc = Table()
        for col in ("class", "n", "sensitivity", "specificity"):
            pc.add_column(col)
        for c, r in per_class.items():
            pc.add_row(
                escape(c), str(r["n"]), _num(r["sensitivity"]), _num(r["specificity"])
            )
        console.print(pc)
    op = m.get("operating_point")
    if op is not None:
        cols = ("sensitivity", "specificity", *NAMES[:2], "mcc")
        point = Table(
            title=f"at the model's operating point p >= {op['threshold']:.4f}"
        )
        for name in cols:
            point.add_column(name)
        point.add_row(*(_num(op[k]) for k in cols))
        console.print(point)


def _print_confusion(console: Console, m: dict, classes: list[str]) -> None:
    """The confusion matrix, rows the true class and columns the predicted one."""
    from rich.table import Table

    console.print(
        "confusion matrix: rows = true class, columns = predicted class",
        highlight=False,
    )
    cm = Table()
    cm.add_column("true \\ predicted")
    for c in classes:
        cm.add_column(escape(c))
    for c, row in zip(classes, m["confusion"], strict=True):
        cm.add_row(escape(c), *map(str, row))
    console.print(cm)
