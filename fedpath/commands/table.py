"""``fedpath table PATHS``: the papers' table (method x target, mean ± std over
seeds) of finished runs; :func:`print_table` also prints the tables of ``run``,
``demo`` and ``suite``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from fedpath.commands.common import add_common, console, no_such_metric
from fedpath.utils.cli_args import SubParsers, is_quiet

#: The title of each ``--split``.
SPLIT_TITLES = {
    "target": "unseen target domain",
    "source_mean": "source domains' test splits (mean)",
    "source_worst": "worst source domain",
    "clients": "clients' own test splits",
    "adapted": "unseen target domain, BatchNorm adapted to it",
    "validation": "sources' validation slides (mean over clients)",
}


def register(sub: SubParsers) -> None:
    """Add ``table`` to ``sub``."""
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
        choices=list(SPLIT_TITLES),
        help="which evaluation to tabulate: the unseen target domain, the sources' "
        "test splits (mean or worst), each client's own test split (one column "
        "per client; runs with lodo.targets: none have only this), or the target "
        "with BatchNorm adapted to its unlabelled images (evaluation.adapt_bn), "
        "or the sources' validation slides (partition.validation > 0; all that a "
        "consortium run, lodo.targets: none with evaluation.protocol: classifier, "
        "has: its row is 'consortium'). Default: the first of these the runs have",
    )
    table.add_argument(
        "--select",
        default="last",
        choices=["last", "selected", "averaged"],
        help="the last round's model, the round selected on the sources' "
        "validation slides (runs with partition.validation > 0), or the mean of "
        "the last rounds' weights (runs with evaluation.swa_from > 0); the last "
        "two with --split target, adapted or validation",
    )
    table.add_argument(
        "--format", default="markdown", choices=["markdown", "csv", "latex"]
    )
    table.add_argument("--out", type=Path, help="also write the table to this file")
    table.add_argument(
        "--units",
        type=Path,
        metavar="FILE.csv",
        help="also write every (method, target, seed) unit's metrics on this "
        "split to this CSV file, which table and compare read back in place of "
        "the run directories (keep a benchmark's per-unit results without its "
        "runs, or pair rows run on different machines)",
    )
    table.add_argument(
        "--baseline",
        default=None,
        help="also compare every method with this one, paired over (target, "
        "seed) units (as fedpath compare)",
    )
    add_common(table)


def run(args: argparse.Namespace) -> int:
    """Print (and with ``--out`` write) the table of the runs under the paths."""
    print_table(
        args.paths,
        args.metric,
        args.split,
        args.format,
        args.out,
        is_quiet(args),
        select=args.select,
        baseline=args.baseline,
        units=args.units,
    )
    return 0


def print_table(
    paths: Sequence[Path],
    metric: str,
    split: str | None,
    fmt: str,
    out: Path | None,
    quiet: bool,
    methods: Sequence[str] | None = None,
    select: str = "last",
    baseline: str | None = None,
    units: Path | None = None,
) -> None:
    """Print (and with ``out`` write) the table of ``metric`` on ``split`` of the
    runs under ``paths``; ``split`` None: the first of ``target``, ``clients``,
    ... that these runs have (runs with ``lodo.targets: none`` have only
    ``clients``), said in the title; ``units``: also write the rows there as a
    units file (:mod:`fedpath.evaluation.units_file`)."""
    from fedpath.commands.compare import check_unique_runs
    from fedpath.evaluation.table_formats import to_csv, to_latex, to_markdown
    from fedpath.evaluation.tables import build_table
    from fedpath.runtime.experiment import collect_rows, splits_of
    from fedpath.utils.io import atomic_write_text

    if split is None:
        have = splits_of(paths)
        split = have[0] if have else "target"  # none: collect_rows says why
    rows = collect_rows(paths, split, select)
    check_unique_runs(paths, rows)  # else two would be averaged as one
    if rows and not any(metric in r.metrics for r in rows):
        no_such_metric(metric, split, rows)
    if methods is not None:  # keep the suite's methods, in the suite's order
        rows = sorted(
            (r for r in rows if r.method in methods),
            key=lambda r: methods.index(r.method),
        )
    if units is not None:
        from fedpath.evaluation.units_file import write_units

        write_units(units, rows, split, select)
    table = build_table(rows, metric=metric)
    text = {"markdown": to_markdown, "csv": to_csv, "latex": to_latex}[fmt](table)
    title = SPLIT_TITLES[split]
    if select == "selected":
        title += ", round selected on the sources' validation slides"
    elif select == "averaged":
        title += ", weights averaged over the last rounds"
    shown = console(False)  # the table is the output asked for, even when quiet
    if fmt == "markdown":
        spread = "mean ± std over seeds"
        if (table.n_seeds == 1).any():
            spread += " (one seed: its value alone)"
        shown.print(f"\n{metric} (%) on the {title}, {spread}\n", highlight=False)
    shown.print(text, highlight=False, markup=False)
    if baseline is not None:
        from fedpath.commands.compare import comparisons, render

        paired = render(comparisons(rows, baseline, metric, None, split))
        shown.print(f"\n{paired}", highlight=False, markup=False)
        text = f"{text}\n\n{paired}"
    if out is not None:
        atomic_write_text(out, text)
