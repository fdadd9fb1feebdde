"""``fedpath plot-ssl RUNS... --out PNG``: training dynamics of self-supervised runs.

:func:`register` adds the subcommand to the main parser's subparsers;
:func:`handler` runs it (``fedpath.cli.COMMANDS`` names it). Bad input raises
:class:`~fedpath.config.ConfigError`, which ``fedpath``'s ``main`` reports as an
``error:`` line with exit code 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fedpath.utils.cli_args import SubParsers


def register(sub: SubParsers) -> None:
    """Add ``plot-ssl`` to ``sub``."""
    p = sub.add_parser(
        "plot-ssl",
        help="training loss, loss components, Delta_t and lambda_t per round",
        description="Plot the training dynamics of self-supervised runs (FedAD "
        "Figs. 7-11) from their results.jsonl: training loss per method, the loss "
        "components, and the ATSA instability Delta_t and weight lambda_t. RUNS "
        "are run directories, results.jsonl files or folders holding them; runs "
        "of one method are averaged per round.",
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUNS")
    p.add_argument("--out", type=Path, required=True, help="output PNG file")
    p.add_argument("--title", default=None)


def handler(args: argparse.Namespace) -> int:
    """Run ``plot-ssl``; print the figure's path and the last-round values."""
    from fedpath.ssl.plots import collect, plot_ssl, summary

    out = plot_ssl(args.runs, args.out, args.title)
    for method, values in sorted(summary(collect(args.runs)).items()):
        shown = ", ".join(
            f"{k[4:]}={v:.4g}"
            for k, v in sorted(values.items())
            if k != "fit/num_examples"
        )
        print(f"{method}: {shown}")
    print(f"wrote {out}")
    return 0
