"""Shared set-up of the benchmarks (not a test module; run the bench_*.py scripts)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from fedpath.utils.cli_args import is_override


def amibr_root(data: str | None, hint: str = "") -> str:
    """The AMi-Br folder given by --data or FEDPATH_AMIBR; exits naming both
    when it holds no manifest.csv."""
    if not data or not (Path(data) / "manifest.csv").is_file():
        raise SystemExit(
            "AMi-Br not found: pass --data DIR or set FEDPATH_AMIBR to the folder "
            f"holding manifest.csv and patches/{hint}"
        )
    return data


def run_wall(run_dir: Path) -> float:
    """A finished run's wall time in seconds, so runs made by an earlier
    invocation, ``--jobs`` or a cluster are timed too: from its ``config.yaml``
    (written when it starts) to its ``final.json`` (written when it ends), or,
    if larger, the sum of the rounds' ``timing`` records in ``results.jsonl``.
    A resumed run rewrites ``config.yaml``, so the first figure then counts
    only its last attempt; the records count every round once."""
    elapsed = (run_dir / "final.json").stat().st_mtime - (
        run_dir / "config.yaml"
    ).stat().st_mtime
    return max(elapsed, _timed_rounds(run_dir / "results.jsonl"))


def _timed_rounds(results: Path) -> float:
    if not results.is_file():
        return 0.0
    total = 0.0
    for line in results.read_text().splitlines():
        rec = json.loads(line) if line.strip() else {}
        if rec.get("kind") == "timing":
            total += sum(
                float(rec.get(k, 0.0)) for k in ("client_s", "server_s", "eval_s")
            )
    return total


def split_overrides(args: argparse.Namespace, options: Sequence[str]) -> None:
    """``--methods a b train.rounds=8`` reads the override as a method (argparse's
    ``nargs="+"`` takes every word up to the next option): move the ``key=value``
    words of the list ``options`` to ``args.overrides``, where they were meant
    to go (in front of the later ones, so a later key still wins)."""
    for opt in options:
        words = getattr(args, opt)
        if words is None:
            continue
        setattr(args, opt, [w for w in words if not is_override(w)])
        args.overrides = [*filter(is_override, words), *args.overrides]


def mean_std(values: Sequence[float], digits: int = 2) -> str:
    """A table cell: mean ± sample std (ddof 1), or the value alone for one
    value (:func:`fedpath.evaluation.table_formats.cell_text`)."""
    from fedpath.evaluation.table_formats import cell_text

    std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return cell_text(float(np.mean(values)), std, len(values), digits)


def setup_threads() -> int:
    threads = int(os.environ.get("FEDPATH_BENCH_THREADS", "2"))
    torch.set_num_threads(threads)
    return threads


def best_of(fn: Callable[[], float], repeats: int = 3) -> float:
    """Best (max) of ``repeats`` throughput measurements (least disturbed by noise)."""
    return max(fn() for _ in range(repeats))


def rss_mib() -> float:
    """Current resident set size in MiB (Linux /proc)."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Timer:
    def __enter__(self) -> Timer:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
