"""``fedpath ensemble``: image model files of one recipe (seeds, snapshots or
folds) written as one model file whose prediction averages its members
(:mod:`fedpath.ensemble`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedpath.commands.common import add_common, console
from fedpath.utils.cli_args import SubParsers, open_probability


def register(sub: SubParsers) -> None:
    """Add ``ensemble`` to ``sub``."""
    en = sub.add_parser(
        "ensemble",
        help="write image model files (seeds, snapshots, folds) as one ensemble "
        "model file",
        description="Writes one model file holding every member; its probability "
        "of an image is the mean of the members' (each with its own temperature "
        "and test-time augmentation). Members must share class names and order, "
        "input size and colour normalization. Use the file with `fedpath "
        "evaluate`, `predict` and `adapt-bn` like any model file; prediction costs "
        "one forward pass per member.",
    )
    en.add_argument("members", type=Path, nargs="+", help="two or more model files")
    en.add_argument("--out", type=Path, required=True, help="the ensemble's file")
    en.add_argument(
        "--threshold",
        type=open_probability,
        help="the ensemble's operating point: predict the second class when its "
        "probability is at least this (two classes; default: the likelier class). "
        "The members' own operating points are not carried over",
    )
    add_common(en)


def run(args: argparse.Namespace) -> int:
    """Write the ensemble; print its members and the file's SHA-256."""
    from fedpath.ensemble import save_ensemble
    from fedpath.models.pretrained import sha256_file
    from fedpath.utils.io import check_output_file

    check_output_file(args.out, "--out")
    meta = save_ensemble(args.out, args.members, args.threshold)
    sha = sha256_file(args.out)
    out = console(False)  # the command's answer: printed even when quiet, as tables
    out.print(
        f"wrote {args.out}: an ensemble of {len(meta.members)} members "
        f"({', '.join(meta.class_names)}; {meta.image_size} px), sha256 {sha}",
        highlight=False,
        markup=False,
    )
    for i, member in enumerate(meta.members, start=1):
        held = f", held out {member['held_out']}" if member.get("held_out") else ""
        out.print(
            f"  member {i}: {member['file']} ({member['backbone']}, "
            f"{member.get('method') or '?'}, seed {member.get('seed')}{held})",
            highlight=False,
            markup=False,
        )
    return 0
