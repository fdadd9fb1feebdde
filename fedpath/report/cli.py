"""``fedpath report``: its command line (imports nothing heavy until it runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedpath.utils.cli_args import SubParsers, add_quiet, int_at_least


def register(sub: SubParsers) -> None:
    """Add ``report`` to ``sub``."""
    p = sub.add_parser(
        "report",
        help="one self-contained HTML report of runs and suites",
        description="Write one HTML file (no network, images embedded) for every "
        "run under the given directories: config and identity, the papers' table "
        "(method x unseen domain, mean ± std over seeds), per-round curves, the "
        "data's stain statistics, FedStain's augmentations on real patches, t-SNE "
        "of each method's embeddings and Grad-CAM on unseen-domain patches; "
        "FedAD's loss terms and ATSA trace; FedHD's clients x methods table.",
    )
    p.add_argument("paths", nargs="+", type=Path, help="run or suite directories")
    p.add_argument("--out", type=Path, required=True, help="the HTML file to write")
    p.add_argument("--title", help="the page's title (default: fedpath report)")
    p.add_argument(
        "--no-figures",
        action="store_true",
        help="leave out the figures that need models and images (t-SNE, Grad-CAM, "
        "stain statistics, augmentations): tables and curves only",
    )
    p.add_argument(
        "--images",
        type=int_at_least(1),
        default=60,
        help="test images per domain for t-SNE and Grad-CAM (default 60)",
    )
    p.add_argument(
        "--seed", type=int_at_least(0), default=0, help="which images; t-SNE's seed"
    )
    add_quiet(p, "print nothing but errors")


def handler(args: argparse.Namespace) -> int:
    """Write the report; print its path and the figures it could not draw."""
    from fedpath.report import write_report

    info = write_report(
        args.paths,
        args.out,
        figures=not args.no_figures,
        per_domain=args.images,
        seed=args.seed,
        title=args.title,
    )
    if not args.quiet:
        print(f"wrote {info.path} ({len(info.figures)} figures, {info.seconds:.1f} s)")
        for note in info.skipped:
            print(f"  not drawn: {note}")
    return 0
