"""``fedpath``: run experiments, the demo, and turn run directories into tables.

Every subcommand is reachable through :func:`main` (``main(argv) -> exit code``), so
the tests drive the real command line in-process.

Building the parser imports no PyTorch (``--help``, ``--version`` and ``list``
answer in well under a second): the subcommands' modules are imported when one
runs, and ``list`` reads :mod:`fedpath.catalog`. A test keeps it that way.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from fedpath import __version__
from fedpath.catalog import KINDS
from fedpath.errors import USER_ERRORS
from fedpath.utils.cli_args import (
    add_launcher,
    add_overrides,
    add_quiet,
    is_quiet,
    parse_args_overrides_anywhere,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedpath",
        description="Federated domain generalization for computational pathology.",
    )
    parser.add_argument("--version", action="version", version=f"fedpath {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        add_quiet(
            p,
            "no progress bars or status lines (also FEDPATH_QUIET=1); tables and "
            "errors still print. Progress is bars on a terminal, timestamped lines "
            "otherwise (FEDPATH_PROGRESS=bars|lines|none to choose)",
        )

    run = sub.add_parser(
        "run",
        help="run an experiment config (every LODO fold x seed)",
        description="Run an experiment: each target domain of lodo.targets is held out "
        "once, the other domains train together, for every seed. Overrides use "
        "dotted keys, e.g. train.rounds=5 algorithm.name=fedprox "
        "algorithm.params.mu=0.1.",
    )
    run.add_argument("config", type=Path, help="experiment YAML file")
    add_overrides(run, "config overrides (values parsed as YAML)")
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue interrupted runs from their last checkpoint and "
        "skip finished ones",
    )
    run.add_argument("--table", action="store_true", help="print the results table")
    add_launcher(run)
    common(run)

    demo = sub.add_parser(
        "demo",
        help="train the methods on synthetic hospitals, print the table",
        description="Without NAME: leave-one-hospital-out on the synthetic "
        "stain-shift hospitals for every method of the demo suite "
        "(fedpath/configs/demo.yaml) and 2 seeds; prints the papers' table. "
        "NAME 'fedhd': FedHD and its baselines on synthetic slide bags with a "
        "different MIL model per hospital (clients x methods table). NAME 'fedad': "
        "federated self-supervised pre-training, then the linear probe on the "
        "held-out hospital. Overrides apply to every method.",
    )
    add_overrides(demo, "NAME: fedhd, fedad", metavar="[NAME] key=value")
    demo.add_argument("--methods", help="comma-separated subset of the demo's methods")
    demo.add_argument("--resume", action="store_true")
    add_launcher(demo)
    common(demo)

    suite = sub.add_parser(
        "suite",
        aliases=["ablate"],
        help="run every variant of a suite file (ablations), print the table",
        description="A suite file lists labelled variants of one base config (e.g. "
        "configs/ablations/fedstain_components.yaml); each variant runs as its own "
        "experiment and becomes one row of the table.",
    )
    suite.add_argument("suite", type=Path, help="suite YAML file")
    add_overrides(suite, "overrides applied to every variant (e.g. seeds=[0])")
    suite.add_argument("--only", help="comma-separated subset of the variants")
    suite.add_argument(
        "--resume",
        action="store_true",
        help="skip finished cells, continue interrupted ones from their checkpoint",
    )
    add_launcher(suite)
    suite.add_argument(
        "--metric", help="metric to tabulate (default: the suite's, else accuracy)"
    )
    common(suite)

    table = sub.add_parser(
        "table",
        help="turn run directories into the papers' table",
        description="Collect final.json of every finished run under the given paths "
        "and "
        "print method x target (mean ± std over seeds, Avg column).",
    )
    table.add_argument("paths", nargs="+", type=Path)
    table.add_argument(
        "--metric",
        default="accuracy",
        help="accuracy, balanced_accuracy, macro_f1, macro_precision, macro_recall, "
        "auroc or mcc; for two classes also f1, precision or recall (positive class); "
        "ece (calibration error, lower is better)",
    )
    table.add_argument(
        "--split",
        default=None,
        choices=["target", "source_mean", "source_worst", "clients", "adapted"],
        help="which evaluation to tabulate: the unseen target domain, the sources' "
        "test splits (mean or worst), each client's own test split (one column "
        "per client; runs with lodo.targets: none have only this), or the target "
        "with BatchNorm adapted to its unlabelled images (evaluation.adapt_bn). "
        "Default: target when the runs have it, else clients",
    )
    table.add_argument(
        "--select",
        default="last",
        choices=["last", "selected", "averaged"],
        help="the last round's model, the round selected on the sources' "
        "validation slides (runs with partition.validation > 0), or the mean of "
        "the last rounds' weights (runs with evaluation.swa_from > 0); the last "
        "two with --split target or adapted",
    )
    table.add_argument(
        "--format", default="markdown", choices=["markdown", "csv", "latex"]
    )
    table.add_argument("--out", type=Path, help="also write the table to this file")
    common(table)

    ev = sub.add_parser(
        "evaluate",
        help="evaluate an exported model (model.fpm) on any readable dataset",
        description="DATA is a manifest CSV (path,label,domain[,slide]), a folder of "
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
        "synthetic_bags:hospital_1 --split test).",
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
    ev.add_argument(
        "--skip-bad",
        action="store_true",
        help="skip (and count) unreadable images instead of failing",
    )
    ev.add_argument(
        "--class-map",
        metavar="FOLDER=CLASS,...",
        help="map class folder names (or manifest labels, or a registered dataset's "
        "classes) to the model's classes, e.g. Mitosis=atypical,Normal=normal; "
        "names not listed match a class of the same name in any case",
    )
    ev.add_argument(
        "--split",
        default="all",
        choices=["all", "test", "train"],
        help="which part of a registered dataset to score (NAME:DOMAIN): every "
        "image, or its test (train) split; a folder or manifest is scored whole",
    )
    ev.add_argument(
        "--bootstrap",
        type=int,
        default=1000,
        metavar="N",
        help="resamples of the images for the 95%% confidence intervals of the "
        "balanced accuracy and AUROC (percentiles 2.5 and 97.5); 0: none",
    )
    ev.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the bootstrap resampling (the same seed, the same intervals)",
    )
    common(ev)

    pr = sub.add_parser(
        "predict",
        help="predict every image of a folder (or one image) with an exported model",
        description="Writes one CSV row per image: path, predicted class, one "
        "probability column per class. Images of another size are resized to the "
        "model's input size (bilinear, antialiased), as the training data was. A "
        "MIL model (models/<client>.fpm) takes a bag file (.h5/.pt) or a folder of "
        "them (recursive) and writes one row per slide: slide, path, predicted, "
        "prob_<class>... at full precision.",
    )
    pr.add_argument("model", type=Path)
    pr.add_argument(
        "images",
        type=Path,
        help="an image file or a folder (recursive); for a MIL model a bag file or "
        "a folder of bag files",
    )
    pr.add_argument("--out", type=Path, required=True, help="predictions CSV")
    pr.add_argument("--batch-size", type=int, default=64)
    pr.add_argument(
        "--skip-bad",
        action="store_true",
        help="skip (and count) unreadable images instead of failing",
    )
    common(pr)

    ad = sub.add_parser(
        "adapt-bn",
        help="adapt an exported model's BatchNorm statistics to a site's unlabelled "
        "images (AdaBN), writing a new model file",
        description="Re-estimates every BatchNorm layer's running mean and variance "
        "on the images under IMAGES (any folder layout, searched recursively; no "
        "label is read, no weight is trained) and writes the adapted model to --out. "
        "A scanner or stain protocol the federation never saw shifts the "
        "activations; re-estimating the statistics on the site's own images undoes "
        "much of that shift. The new file records how many images it was adapted "
        "on (adapted_bn); use it with `fedpath evaluate` / `fedpath predict` like "
        "any model file. Use a few hundred images or more, of the kind the model "
        "will see.",
    )
    ad.add_argument("model", type=Path, help="an image model file (model.fpm)")
    ad.add_argument(
        "images", type=Path, help="a folder of the site's images (recursive)"
    )
    ad.add_argument("--out", type=Path, required=True, help="the adapted model file")
    ad.add_argument("--batch-size", type=int, default=64)
    ad.add_argument(
        "--skip-bad",
        action="store_true",
        help="skip (and count) unreadable images instead of failing",
    )
    common(ad)

    lst = sub.add_parser(
        "list",
        help="list the datasets, backbones, MIL models and algorithms, one line each",
        description="Every registered name a config can use, with its one-line "
        "summary (from fedpath/catalog.json, without loading PyTorch).",
    )
    lst.add_argument("what", nargs="?", default="all", choices=["all", *KINDS])
    lst.add_argument(
        "--live",
        action="store_true",
        help="ask the registries themselves (loads PyTorch; shows entries your "
        "own code registered too)",
    )

    from fedpath.wsi import cli as wsi_cli

    wsi_cli.register(sub)

    from fedpath.deploy import cli as flower_cli

    flower_cli.register(sub)

    from fedpath.ssl import cli as ssl_cli

    ssl_cli.register(sub)

    from fedpath.mil import render_cli

    render_cli.register(sub)
    from fedpath.report import cli as report_cli

    report_cli.register(sub)

    sr = sub.add_parser(
        "stain-report",
        help="per-domain stain-intensity histograms, Q-Q plots, skewness/kurtosis",
        description="FedStain Fig. 3 for any dataset: per domain, the distribution of "
        "a stain-intensity channel with its Gaussian fit, a normal Q-Q plot, and "
        "skewness / excess-kurtosis bars. Writes OUT/stain_distribution.png and .csv.",
    )
    add_overrides(sr)
    sr.add_argument("--config", type=Path, help="experiment YAML (default: the demo's)")
    sr.add_argument("--out", type=Path, required=True, help="output folder")
    sr.add_argument(
        "--channel", default="gray", choices=["gray", "r", "g", "b", "L", "H", "E"]
    )
    sr.add_argument("--images", type=int, default=200, help="images sampled per domain")
    sr.add_argument("--title", default=None)

    au = sub.add_parser(
        "audit",
        help="what each client received and sent, per round (from traffic.jsonl)",
        description="Reads RUN_DIR/traffic.jsonl, written while the run ran: per "
        "round, stage and client, the arrays (group, name, dtype, shape, bytes; "
        "never values) each client received and sent; then whether anything "
        "image-shaped or raw (pooled images, real embeddings) left a client.",
    )
    au.add_argument("run_dir", type=Path, help="a run: OUT/NAME/METHOD/TARGET/seedN")
    au.add_argument("--detail", action="store_true", help="one line per array")

    data = sub.add_parser("data", help="describe a dataset (domains, classes, counts)")
    data.add_argument(
        "--config", type=Path, help="experiment YAML (default: the demo's)"
    )
    add_overrides(data)

    check = sub.add_parser(
        "check",
        help="validate an experiment config or a suite file, without running it",
        description="Load CONFIG with the overrides and check every key and value, "
        "as `fedpath run` does before it starts (a suite file: every variant). "
        "Prints one line per config; a bad key or value exits 2 naming it. "
        "Loads no PyTorch and reads no data.",
    )
    check.add_argument("config", type=Path, help="experiment or suite YAML file")
    add_overrides(check, "config overrides (values parsed as YAML)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = parse_args_overrides_anywhere(build_parser(), argv)
    quiet = is_quiet(args)
    err = Console(stderr=True, soft_wrap=True)
    try:
        return _dispatch(args, quiet)
    except USER_ERRORS as e:
        # the message is text, not markup: 'fedpath[ray]', seeds=[0,1] print as written
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
        return 2
    except KeyboardInterrupt:
        err.print("interrupted; continue with --resume")
        return 130


def _cmd_audit(args: argparse.Namespace) -> int:
    from rich.table import Table

    from fedpath.runtime.audit import audit

    rows, findings = audit(args.run_dir, args.detail)
    table = Table(title=f"traffic of {args.run_dir}")
    for col in ("round", "stage", "client", "received", "sent"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    console = Console(soft_wrap=True)
    console.print(table)
    if findings:
        n = len(findings)
        console.print(f"[bold]raw or image-shaped data left a client[/] ({n}):")
        for f in findings:
            console.print(f"  {f}", highlight=False)
    else:
        console.print(
            "nothing image-shaped or raw left any client: weights, statistics, "
            "synthetic data and metrics only"
        )
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from fedpath import catalog

    entries = catalog.collect() if args.live else catalog.load()
    print(catalog.render(entries, args.what))
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from fedpath.config import ExperimentConfig, load_config, read_yaml_mapping
    from fedpath.runtime.suite import load_suite

    def line(cfg: ExperimentConfig) -> str:
        return (
            f"valid ({cfg.name}, algorithm {cfg.algorithm.name}, backbone "
            f"{cfg.model.backbone}, data {cfg.data.name})"
        )

    raw = read_yaml_mapping(args.config)
    if "variants" in raw:  # every variant, also those `default` leaves out
        variants = raw["variants"]
        every = list(variants) if isinstance(variants, dict) else None
        _, configs = load_suite(args.config, args.overrides, every)
        print(f"{args.config}: valid suite ({len(configs)} variants)")
        for cfg in configs:
            print(f"  {cfg.method}: {line(cfg)}")
    else:
        print(f"{args.config}: {line(load_config(args.config, args.overrides))}")
    return 0


def _dispatch(args: argparse.Namespace, quiet: bool) -> int:
    """Run the parsed subcommand; its module is imported only now."""
    if args.command == "list":
        return _cmd_list(args)
    if args.command == "audit":
        return _cmd_audit(args)
    if args.command == "check":
        return _cmd_check(args)
    if hasattr(args, "report_handler"):
        return int(args.report_handler(args))
    if hasattr(args, "fedhd_render_handler"):
        return int(args.fedhd_render_handler(args))
    if hasattr(args, "ssl_handler"):
        return int(args.ssl_handler(args))
    if hasattr(args, "flower_handler"):
        from fedpath.deploy import cli as flower_cli

        return flower_cli.run(args)
    if hasattr(args, "wsi_handler"):
        from fedpath.wsi import cli as wsi_cli

        return wsi_cli.run(args)
    from fedpath import commands

    handlers = {
        "run": lambda: commands._cmd_run(args, quiet),
        "demo": lambda: commands._cmd_demo(args, quiet),
        "suite": lambda: commands._cmd_suite(args, quiet),
        "ablate": lambda: commands._cmd_suite(args, quiet),
        "table": lambda: commands._cmd_table(args, quiet),
        "stain-report": lambda: commands._cmd_stain_report(args),
        "evaluate": lambda: commands._cmd_evaluate(args, quiet),
        "predict": lambda: commands._cmd_predict(args, quiet),
        "adapt-bn": lambda: commands._cmd_adapt_bn(args, quiet),
        "data": lambda: commands._cmd_data(args),
    }
    if args.command in handlers:
        return int(handlers[args.command]())
    return 1


if __name__ == "__main__":
    sys.exit(main())
