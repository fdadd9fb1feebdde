"""The commands that describe rather than train: ``list`` (the registered names),
``check`` (a config, without running it), ``data`` (a dataset's counts),
``audit`` (what crossed the network in a run) and ``stain-report`` (a dataset's
stain-intensity distributions).

``list`` and ``check`` load no PyTorch (``list`` reads :mod:`fedpath.catalog`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from fedpath.catalog import KINDS
from fedpath.commands.common import packaged_config
from fedpath.errors import ConfigError
from fedpath.utils.cli_args import SubParsers, add_overrides, int_at_least


def register_list(sub: SubParsers) -> None:
    """Add ``list`` to ``sub``."""
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


def run_list(args: argparse.Namespace) -> int:
    """Print the catalog (or, with ``--live``, the registries) of ``what``."""
    from fedpath import catalog

    entries = catalog.collect() if args.live else catalog.load()
    print(catalog.render(entries, args.what))
    return 0


def register_stain_report(sub: SubParsers) -> None:
    """Add ``stain-report`` to ``sub``."""
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
    sr.add_argument(
        "--images",
        type=int_at_least(1),
        default=200,
        help="images sampled per domain",
    )
    sr.add_argument("--title", default=None)


def run_stain_report(args: argparse.Namespace) -> int:
    """Write the stain report of the dataset; print each domain's moments."""
    from fedpath.config import load_config
    from fedpath.runtime.experiment import load_dataset
    from fedpath.stain.analysis import analyse, write_report
    from fedpath.utils.io import make_folder

    cfg = load_config(args.config or packaged_config("demo_base"), args.overrides)
    make_folder(args.out, "--out")  # before the images are read
    ds = load_dataset(cfg.data)
    rows, samples = analyse(ds, args.channel, args.images)
    title = args.title or f"{ds.name}: {args.channel} intensity per domain"
    png, table = write_report(rows, samples, args.out, title, args.channel)
    console = Console(soft_wrap=True)
    for r in rows:
        console.print(
            f"{r.domain:>24}: skewness {r.skewness:+.3f}, excess kurtosis "
            f"{r.excess_kurtosis:+.3f} ({r.images} images)",
            highlight=False,
        )
    console.print(f"wrote {png} and {table}")
    return 0


def register_audit(sub: SubParsers) -> None:
    """Add ``audit`` to ``sub``."""
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


def run_audit(args: argparse.Namespace) -> int:
    """Print the run's traffic per round, then whether raw data left a client."""
    from rich.table import Table

    from fedpath.runtime.audit import audit

    if not args.run_dir.is_dir():
        state = "is a file" if args.run_dir.exists() else "does not exist"
        raise ConfigError(
            f"run directory {args.run_dir} {state}; expected a run's folder "
            "(OUT/NAME/METHOD/TARGET/seedN)"
        )
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


def register_data(sub: SubParsers) -> None:
    """Add ``data`` to ``sub``."""
    data = sub.add_parser("data", help="describe a dataset (domains, classes, counts)")
    data.add_argument(
        "--config", type=Path, help="experiment YAML (default: the demo's)"
    )
    add_overrides(data)


def run_data(args: argparse.Namespace) -> int:
    """Print the dataset's table of images per domain and class."""
    from rich.table import Table

    from fedpath.config import load_config
    from fedpath.runtime.experiment import load_dataset

    cfg = load_config(args.config or packaged_config("demo_base"), args.overrides)
    ds = load_dataset(cfg.data)
    rows = ds.counts()
    table = Table(
        title=f"{ds.name}: {len(ds.domains)} domains, classes {ds.classes}, "
        f"{ds.image_size}px"
    )
    for col in rows[0]:
        table.add_column(col)
    for r in rows:
        table.add_row(*(str(v) for v in r.values()))
    Console().print(table)
    return 0


def register_check(sub: SubParsers) -> None:
    """Add ``check`` to ``sub``."""
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


def run_check(args: argparse.Namespace) -> int:
    """Load the config (a suite: every variant) and print one line per config."""
    from fedpath.config import ExperimentConfig, load_config
    from fedpath.runtime.suite import load_suite
    from fedpath.utils.yaml_io import read_yaml_mapping

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
