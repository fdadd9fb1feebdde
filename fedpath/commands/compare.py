"""``fedpath compare PATHS --baseline METHOD``: every method against a baseline,
paired over (held-out domain, seed) units, with an interval, a test and a
verdict (:mod:`fedpath.evaluation.paired`). ``fedpath table --baseline`` and the
demo print the same lines under their tables."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fedpath.commands.common import add_common, console, no_such_metric
from fedpath.config import ConfigError
from fedpath.utils.cli_args import SubParsers, positive_number

if TYPE_CHECKING:
    from fedpath.evaluation.paired import Comparison
    from fedpath.evaluation.tables import ResultRow


def register(sub: SubParsers) -> None:
    """Add ``compare`` to ``sub``."""
    p = sub.add_parser(
        "compare",
        help="each method against a baseline: paired differences with a 95%% "
        "interval, a test and a verdict",
        description="Pair every method's runs with the baseline's on the same "
        "(held-out domain, seed) units and report the mean difference (points), "
        "its bootstrap 95% interval, a paired test (exact sign-flip permutation "
        "up to 16 units, Wilcoxon signed-rank above), wins and losses, and a "
        "verdict: better, worse, or not separated at this power with the units "
        "it would take.",
    )
    p.add_argument("paths", nargs="+", type=Path, help="run directories")
    p.add_argument("--baseline", required=True, help="the method to compare with")
    add_compare_options(p)
    p.add_argument(
        "--split",
        default="target",
        choices=[
            "target",
            "source_mean",
            "source_worst",
            "clients",
            "adapted",
            "validation",
        ],
        help="which evaluation (default: the unseen target domain); validation: "
        "the mean over the clients of their validation slides "
        "(partition.validation > 0), where a recipe is chosen without the target",
    )
    p.add_argument("--select", default="last", choices=["last", "selected", "averaged"])
    p.add_argument("--format", default="markdown", choices=["markdown", "json"])
    p.add_argument("--out", type=Path, help="also write the comparison here")
    add_common(p)


def add_compare_options(p: argparse.ArgumentParser) -> None:
    """``--metric`` and ``--effect`` (shared with ``fedpath table``)."""
    p.add_argument("--metric", default="balanced_accuracy", help="metric to compare")
    p.add_argument(
        "--effect",
        type=positive_number,
        default=None,
        help="the difference (points) the power statement is about "
        "(default: the observed mean difference)",
    )


def run(args: argparse.Namespace) -> int:
    """Print (and with ``--out`` write) the comparisons."""
    from fedpath.runtime.experiment import collect_rows

    rows = collect_rows(args.paths, args.split, args.select)
    check_unique_runs(args.paths, rows)  # else one of two would be dropped
    comps = comparisons(rows, args.baseline, args.metric, args.effect, args.split)
    text = render(comps, args.format)
    console(False).print(text, highlight=False, markup=False)
    if args.out is not None:
        from fedpath.utils.io import atomic_write_text

        atomic_write_text(args.out, text + "\n")
    return 0


def comparisons(
    rows: Sequence[ResultRow],
    baseline: str,
    metric: str,
    effect: float | None,
    split: str = "target",
) -> list[Comparison]:
    """:func:`~fedpath.evaluation.paired.compare_all`, its errors as config errors
    naming the option."""
    from fedpath.evaluation.paired import compare_all

    if not any(metric in r.metrics for r in rows):
        no_such_metric(metric, split, rows)
    try:
        return compare_all(rows, baseline, metric, effect=effect)
    except ValueError as e:
        raise ConfigError(f"--baseline {baseline}: {e}") from None


def render(comps: Sequence[Comparison], fmt: str = "markdown") -> str:
    """The comparisons as a Markdown table plus one sentence each, or JSON."""
    from fedpath.evaluation.paired import to_markdown

    if fmt == "json":
        return json.dumps([as_dict(c) for c in comps], indent=2)
    if not comps:
        return "no other method to compare with the baseline"
    lines = [to_markdown(comps), ""]
    lines += [c.line() for c in comps]
    return "\n".join(lines)


def as_dict(c: Comparison) -> dict[str, object]:
    """A comparison as JSON-ready data (units as ``[target, seed]``)."""
    return {
        "method": c.method,
        "baseline": c.baseline,
        "metric": c.metric,
        "units": [list(u) for u in c.units],
        "diffs": list(c.diffs),
        "mean": c.mean,
        "ci95": list(c.ci),
        "p_value": c.p_value,
        "test": c.test,
        "wins": c.wins,
        "losses": c.losses,
        "ties": c.ties,
        "verdict": c.verdict,
        "mixed_environments": c.mixed,
    }


def check_unique_runs(paths: Sequence[Path], rows: Sequence[ResultRow]) -> None:
    """A ConfigError naming the two run directories when two rows are one
    (method, target or client, seed): a copied run directory, a path given
    twice or inside another, or two experiments mixed. Both would be averaged
    (the table) or one silently dropped (the paired comparison)."""
    seen: set[tuple[str, str, int]] = set()
    for r in rows:
        key = (r.method, r.target, r.seed)
        if key not in seen:
            seen.add(key)
            continue
        from fedpath.runtime.experiment import find_runs, units_files
        from fedpath.runtime.records import read_final

        dirs = []
        for d in find_runs(paths):
            rec = read_final(d)
            clients = rec["evaluation"].get("clients") or {}
            if (rec["method"], rec["seed"]) == (r.method, r.seed) and (
                rec["target"] == r.target or r.target in clients
            ):
                dirs.append(str(d))
        dirs += [str(f) for f in units_files(paths) if _holds(f, key)]
        where = " and ".join(map(repr, dirs[:2])) or ", ".join(map(str, paths))
        raise ConfigError(
            f"two finished runs are method {r.method!r}, domain or client "
            f"{r.target!r}, seed {r.seed} ({where}): a run directory copied, a "
            "path given twice or inside another, a units file beside the runs it "
            "was written from, or two experiments mixed; give paths that hold "
            "each run once"
        )


def _holds(units: Path, key: tuple[str, str, int]) -> bool:
    """The units file ``units`` has the unit ``key`` (method, target, seed)."""
    from fedpath.evaluation.units_file import read_units

    return any(
        (r.method, r.target, r.seed) == key
        for rows in read_units(units).values()
        for r in rows
    )
