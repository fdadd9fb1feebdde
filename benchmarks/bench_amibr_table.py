"""The real-data table: AMi-Br leave-one-scanner-out, federated methods beside a
local-only and a pooled (centralized) row, one backbone, the same budget for all.

Every method runs the suite ``configs/amibr/<backbone>_methods.yaml`` (FedAvg,
FedProx, FedBN, FedCCRL, FedStain, pooled = ``central_supervised``), one fold
(held-out scanner) and seed at a time. The **local-only** row trains each source
hospital alone (the base config restricted to that hospital and the held-out
one: FedAvg with a single client is local training) and averages its balanced
accuracy / AUROC at the unseen scanner over the source hospitals. Runs are
resumable (``--out`` keeps them); the table is mean ± std over seeds per fold
with the average over folds, and the wall time of every run.

    FEDPATH_AMIBR=/path/to/amibr python benchmarks/bench_amibr_table.py \\
        --backbone lite0 --folds TUPAC16 --seeds 0 --out runs/amibr_table
    python benchmarks/bench_amibr_table.py --data /path/to/amibr --backbone small_cnn

Threads: ``runtime.threads`` of the config (1). ``--jobs N`` runs the cells N at
a time first (the suite's with ``fedpath suite --jobs N --resume``, the local
runs as N ``fedpath run`` processes), then tabulates from the run directories;
on a cluster, run the suite with ``--launcher ray`` (docs/parallel.md) into
``--out`` and this script tabulates what it finds.

``--against DIR`` pairs every row with another method's runs
(``DIR/<held-out scanner>/seed<k>/final.json``, e.g. a recipe variant of
``configs/amibr/lite0_tail_recipe.yaml``) over the (scanner, seed) units, the
same round and scores: DIR minus the row, with a bootstrap interval and a
paired test (:func:`fedpath.evaluation.paired.compare`); the way to set the
local-only row beside a federated run of the same recipe.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import yaml
from _common import amibr_root, mean_std, run_wall, split_overrides

from fedpath.cli import main as fedpath_main
from fedpath.config import load_config
from fedpath.evaluation.paired import compare
from fedpath.evaluation.tables import ResultRow
from fedpath.runtime.experiment import WHY_NOT

FOLDS = ("MIDOG21_HamamatsuXR", "MIDOG21_HamamatsuS360", "MIDOG21_AperioCS2", "TUPAC16")
METRICS = ("balanced_accuracy", "auroc", "ece")
#: printed in % (ECE as it is, 0-1)
PERCENT = ("balanced_accuracy", "auroc")


def _final(run_dir: Path) -> dict | None:
    f = run_dir / "final.json"
    return json.loads(f.read_text()) if f.is_file() else None


def _target(rec: dict, select: str, adapted: bool = False) -> dict:
    """The unseen scanner's metrics of the last or the source-selected round
    (``adapted``: with BatchNorm statistics re-estimated on its unlabelled
    images, ``evaluation.adapt_bn``)."""
    ev = rec["evaluation"]
    if select != "last":
        if select not in ev:
            raise SystemExit(f"--select {select}: a run with {WHY_NOT[select]}")
        ev = ev[select]
    if not adapted:
        return dict(ev["target"])
    if "adapted" not in ev:
        raise SystemExit(
            "--adapted: a run without evaluation.adapt_bn=true (measure finished "
            "runs with benchmarks/bench_test_time.py)"
        )
    return dict(ev["adapted"]["target"])


def _run(argv: list[str]) -> None:
    code = fedpath_main(argv)
    if code != 0:
        raise SystemExit(f"fedpath {' '.join(argv)} failed with exit code {code}")


def _parallel(
    args: argparse.Namespace, suite: Path, base: Path, name: str, common: list[str]
) -> None:
    """Every cell of the table, ``args.jobs`` at a time (resumable)."""
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    grid = [f"seeds=[{','.join(map(str, args.seeds))}]"]
    grid.append(f"lodo.targets=[{','.join(args.folds)}]")
    in_suite = [m for m in args.methods if m != "local"]
    t0 = time.perf_counter()
    if in_suite:
        argv = ["suite", str(suite), *common, *grid, "--only", ",".join(in_suite)]
        code = fedpath_main([*argv, "--jobs", str(args.jobs), "--resume", "--quiet"])
        if code != 0:
            raise SystemExit(f"fedpath {' '.join(argv)} failed with exit code {code}")
    if "local" in args.methods:
        runs = []
        for fold in args.folds:
            for h in (d for d in FOLDS if d != fold):
                over = [
                    *common,
                    f"seeds=[{','.join(map(str, args.seeds))}]",
                    f"lodo.targets=[{fold}]",
                    f"name={name}_local_{h}",
                    "label=local",
                    "algorithm.name=fedavg",
                    f"data.params.domains=[{h}, {fold}]",
                ]
                cli = [sys.executable, "-m", "fedpath.cli", "run", str(base)]
                runs.append([*cli, *over, "--resume", "--quiet"])
        with ThreadPoolExecutor(args.jobs) as pool:
            codes = list(pool.map(lambda c: subprocess.run(c).returncode, runs))
        if any(codes):
            raise SystemExit(f"{sum(1 for c in codes if c)} local runs failed")
    print(f"all cells in {time.perf_counter() - t0:.0f} s with --jobs {args.jobs}")


def _pair(
    args: argparse.Namespace, scores: dict[tuple[str, str, int], dict[str, float]]
) -> None:
    """``--against``: that folder's runs minus each row, paired over units."""
    label = args.against.name
    rows = [
        ResultRow(m, fold, seed, values) for (m, fold, seed), values in scores.items()
    ]
    for fold in args.folds:
        for seed in args.seeds:
            rec = _final(args.against / fold / f"seed{seed}")
            if rec is None:
                raise SystemExit(
                    f"--against {args.against}: no finished run for {fold}, "
                    f"seed {seed} ({fold}/seed{seed}/final.json)"
                )
            rows.append(
                ResultRow(label, fold, seed, _target(rec, args.select, args.adapted))
            )
    print(f"\n{label} against each row, paired over (scanner, seed) units:\n")
    for m in args.methods:
        for metric in METRICS:
            print("  " + compare(rows, label, m, metric, scale=100.0).line())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=os.environ.get("FEDPATH_AMIBR"))
    ap.add_argument(
        "--backbone",
        choices=("lite0", "small_cnn", "lite0_frozen", "lite0_tail"),
        default="lite0",
        help="configs/amibr/<backbone>.yaml; lite0_frozen: the frozen-feature "
        "fast path (fedavg, fedprox, local, pooled only); lite0_tail: the last "
        "three stages fine-tuned on cached maps (adds fedbn)",
    )
    ap.add_argument("--folds", nargs="+", default=list(FOLDS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="default: every variant of the backbone's suite, local and pooled",
    )
    ap.add_argument("--out", type=Path, default=Path("runs/amibr_table"))
    ap.add_argument(
        "--select",
        choices=("last", "selected", "averaged"),
        default="last",
        help="the last round, the round chosen on the sources' validation split, "
        "or the mean of the last rounds' weights (evaluation.swa_from)",
    )
    ap.add_argument(
        "--adapted",
        action="store_true",
        help="tabulate the models adapted to the unseen scanner's unlabelled "
        "images (evaluation.adapt_bn, on in configs/amibr/)",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="run the table's cells N at a time first (fedpath suite --jobs N "
        "--resume for the suite's methods, N `fedpath run` processes for the "
        "local rows), then tabulate; default: one after another",
    )
    ap.add_argument(
        "--against",
        type=Path,
        default=None,
        help="a method folder (<scanner>/seed<k>/final.json) to pair every row "
        "with: its score minus the row's, over the (scanner, seed) units",
    )
    ap.add_argument("overrides", nargs="*", help="extra key=value for every run")
    args = ap.parse_args()
    split_overrides(args, ("methods", "folds"))
    suite = Path(f"configs/amibr/{args.backbone}_methods.yaml")
    base = Path(f"configs/amibr/{args.backbone}.yaml")
    variants = list(yaml.safe_load(suite.read_text())["variants"])
    known = [*(m for m in variants if m != "pooled"), "local", "pooled"]
    if args.methods is None:
        args.methods = known
    unknown = [m for m in args.methods if m not in known]
    if unknown:
        ap.error(
            f"--methods: unknown {', '.join(unknown)} for --backbone "
            f"{args.backbone} ({suite}); expected some of {', '.join(known)}"
        )
    bad_folds = [f for f in args.folds if f not in FOLDS]
    if bad_folds:
        ap.error(
            f"--folds: unknown {', '.join(bad_folds)}; "
            f"expected some of {', '.join(FOLDS)}"
        )
    args.data = amibr_root(args.data, " (see configs/amibr/lite0.yaml)")
    name = load_config(base).name
    common = [f"data.root={args.data}", f"output_dir={args.out}", *args.overrides]
    walls: dict[str, list[float]] = {}
    if args.jobs:
        _parallel(args, suite, base, name, common)
    # (method, fold, seed) -> metrics
    scores: dict[tuple[str, str, int], dict[str, float]] = {}
    for fold in args.folds:
        sources = [d for d in FOLDS if d != fold]
        for seed in args.seeds:
            one = [*common, f"seeds=[{seed}]", f"lodo.targets=[{fold}]"]
            for m in args.methods:
                if m == "local":
                    per: list[dict[str, float]] = []
                    for h in sources:
                        over = [
                            *one,
                            f"name={name}_local_{h}",
                            "label=local",
                            "algorithm.name=fedavg",
                            f"data.params.domains=[{h}, {fold}]",
                        ]
                        rd = (
                            args.out
                            / f"{name}_local_{h}"
                            / "local"
                            / fold
                            / f"seed{seed}"
                        )
                        if _final(rd) is None:
                            _run(["run", str(base), *over, "--quiet"])
                        rec = _final(rd)
                        assert rec is not None
                        walls.setdefault("local", []).append(run_wall(rd))
                        per.append(_target(rec, args.select, args.adapted))
                    scores[("local", fold, seed)] = {
                        k: float(np.mean([p.get(k, np.nan) for p in per]))
                        for k in METRICS
                    }
                    continue
                rd = args.out / name / m / fold / f"seed{seed}"
                if _final(rd) is None:
                    _run(["suite", str(suite), *one, "--only", m, "--quiet"])
                rec = _final(rd)
                assert rec is not None
                walls.setdefault(m, []).append(run_wall(rd))
                target = _target(rec, args.select, args.adapted)
                scores[(m, fold, seed)] = {
                    k: float(target.get(k, np.nan)) for k in METRICS
                }
    adapted = " (BatchNorm adapted to it)" if args.adapted else ""
    for metric in METRICS:
        scale, digits = (100, 2) if metric in PERCENT else (1, 3)
        unit = " (%)" if metric in PERCENT else " (expected calibration error)"
        print(
            f"\n{metric}{unit} at the unseen scanner{adapted}, {args.backbone}, "
            f"mean ± std "
            f"over seeds {args.seeds}\n"
        )
        print("| Method | " + " | ".join(args.folds) + " | Avg |")
        print("|---|" + "---:|" * (len(args.folds) + 1))
        for m in args.methods:
            cells, per_seed = [], []
            for fold in args.folds:
                v = [scale * scores[(m, fold, s)][metric] for s in args.seeds]
                cells.append(mean_std(v, digits))
            for s in args.seeds:
                per_seed.append(
                    np.mean([scale * scores[(m, f, s)][metric] for f in args.folds])
                )
            avg = mean_std([float(x) for x in per_seed], digits)
            print(f"| {m} | " + " | ".join(cells) + f" | {avg} |")
    if args.against is not None:
        _pair(args, scores)
    print(
        "\nwall time per run (s, config.yaml to final.json; local: per source "
        "hospital):"
    )
    for m, w in walls.items():
        print(
            f"  {m}: {np.mean(w):.0f} mean ({min(w):.0f}-{max(w):.0f}) over "
            f"{len(w)} runs, {sum(w) / 3600:.2f} h in all"
        )


if __name__ == "__main__":
    main()
