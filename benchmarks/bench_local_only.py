"""The local-only row of any leave-one-domain-out table: each source hospital
trains alone and is scored at the held-out one; the row is the mean over the
source hospitals, per (held-out domain, seed) unit.

Every run is the given config (a config file, or one ``--variant`` of a suite
with the suite's overrides) with ``lodo.sources=[<hospital>]`` and FedAvg (one
client: local training), so the budget, recipe and scoring are the table's own.
Runs are resumable (``fedpath run --resume``: a finished run is handed back, a
changed config refused). ``--against DIR`` pairs a method's runs (any folder
``fedpath compare`` reads) with the row over the same units: DIR minus
local-only, with a bootstrap interval and a paired test. ``--units FILE`` keeps
the row's units in a units file (``fedpath table --units``): the file's other
units stay, its ``local`` units are replaced, so ``fedpath table`` and
``fedpath compare`` read the row beside the others.

    python benchmarks/bench_local_only.py configs/claims/fedstain_synthetic.yaml \\
        --variant fedavg --out runs/claims/synthetic_local --jobs 2 \\
        --against runs/claims/synthetic/fedavg runs/claims/synthetic/fedstain

Prints the row per held-out domain (mean ± std over seeds) with the average,
each hospital alone per held-out domain (mean over seeds), the paired
comparisons and the wall time per run. Threads: the config's
``runtime.threads``; ``--jobs N`` runs N at a time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from _common import mean_std, run_wall, split_overrides

from fedpath.config import ConfigError, ExperimentConfig, load_config
from fedpath.data.partition import lodo_plan
from fedpath.errors import DataError, ResumeError
from fedpath.evaluation.paired import compare
from fedpath.evaluation.tables import ResultRow
from fedpath.evaluation.units_file import is_units_file, rows_for, write_units
from fedpath.runtime.experiment import (
    SPLITS,
    collect_rows,
    find_runs,
    load_dataset,
    run_dir_for,
)
from fedpath.runtime.persistence import finished_record
from fedpath.runtime.suite import load_suite
from fedpath.utils.yaml_io import read_yaml_mapping

#: the row's label in tables and comparisons
LOCAL = "local"


def resolve(path: Path, variant: str | None, overrides: list[str]) -> ExperimentConfig:
    """The table's config: ``path`` itself, or its ``variant`` if it is a suite."""
    if "variants" in read_yaml_mapping(path):
        if variant is None:
            raise SystemExit(f"{path} is a suite: name its --variant (e.g. fedavg)")
        return load_suite(path, overrides, [variant])[1][0]
    if variant is not None:
        raise SystemExit(f"--variant {variant}: {path} is a config, not a suite")
    return load_config(path, overrides)


def plan(cfg: ExperimentConfig) -> list[tuple[str, str, int]]:
    """Every (held-out domain, source hospital, seed) the row needs."""
    if cfg.lodo.targets == "none":
        raise SystemExit("lodo.targets: none holds nothing out; a local-only row needs")
    folds = lodo_plan(
        load_dataset(cfg.data),
        cfg.lodo.targets,
        cfg.evaluation.probe_train,
        cfg.lodo.sources,
    )
    return [(f.target, s, seed) for f in folds for s in f.sources for seed in cfg.seeds]


def run_all(
    cfg: ExperimentConfig, cells: list[tuple[str, str, int]], jobs: int
) -> None:
    """Each cell not yet finished as one ``fedpath run --resume`` process,
    ``jobs`` at a time; a finished one is checked to be of this config."""
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = out / "local_config.yaml"
    base.write_text(cfg.to_yaml())
    todo = []
    for target, source, seed in cells:
        over = [
            f"lodo.targets=[{target}]",
            f"lodo.sources=[{source}]",
            f"seeds=[{seed}]",
            "algorithm.name=fedavg",
            "algorithm.params={}",
            f"label={LOCAL}_{source}",
        ]
        # a finished run of this very config is handed back here, without
        # starting a process (a changed config is refused, naming the keys)
        cell_cfg = load_config(base, over)
        if finished_record(
            run_dir_for(cell_cfg, target, seed), cell_cfg, cell_cfg.hash()
        ):
            continue
        todo.append([sys.executable, "-m", "fedpath.cli", "run", str(base), *over])
    done = 0

    def one(argv: list[str]) -> int:
        nonlocal done
        code = subprocess.run([*argv, "--resume", "--quiet"]).returncode
        done += 1
        print(
            f"[{time.strftime('%H:%M:%S')}] {done}/{len(todo)} local runs", flush=True
        )
        return code

    with ThreadPoolExecutor(jobs) as pool:
        codes = list(pool.map(one, todo))
    if any(codes):
        raise SystemExit(f"{sum(1 for c in codes if c)} local runs failed")


def local_rows(
    cfg: ExperimentConfig, metrics: list[str], select: str
) -> tuple[list[ResultRow], dict[tuple[str, str], list[float]]]:
    """The row (mean over source hospitals per unit of every metric all their
    runs recorded, so a units file's rows share their metrics) and each
    hospital alone's first metric per (held-out domain, hospital), from the
    finished runs."""
    rows = [
        r
        for r in collect_rows([Path(cfg.output_dir)], "target", select)
        if r.method.startswith(f"{LOCAL}_")
    ]
    per_unit: dict[tuple[str, int], list[ResultRow]] = defaultdict(list)
    alone: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        per_unit[(r.target, r.seed)].append(r)
        value = r.metrics.get(metrics[0])
        if value is not None:
            alone[(r.target, r.method[len(LOCAL) + 1 :])].append(100 * value)
    out = []
    for (target, seed), rs in sorted(per_unit.items()):
        shared = set.intersection(*(set(r.metrics) for r in rs))
        mean = {m: float(np.mean([r.metrics[m] for r in rs])) for m in sorted(shared)}
        # one environment when the hospitals' runs share it, else each of them
        env = " | ".join(sorted({r.environment for r in rs}))
        out.append(ResultRow(LOCAL, target, seed, mean, env))
    return out, alone


def keep_units(path: Path, rows: list[ResultRow], select: str) -> int:
    """The row's units into the units file ``path`` beside its other units
    (its earlier ``local`` units replaced); the number of units it holds."""
    try:
        kept = []
        if is_units_file(path) and path.exists():
            kept = rows_for(path, "target", select, SPLITS)
        merged = [r for r in kept if r.method != LOCAL] + rows
        write_units(path, merged, "target", select)
    except ConfigError as e:  # not a .csv name
        raise SystemExit(str(e)) from None
    except DataError as e:  # the file is there but not a units file of select
        raise SystemExit(f"--units: {e}") from None
    return len(merged)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("config", type=Path, help="a config file or a suite")
    ap.add_argument("--variant", default=None, help="the suite's variant to run")
    ap.add_argument("--out", type=Path, required=True, help="where the runs go")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--metrics", nargs="+", default=["balanced_accuracy", "auroc"])
    ap.add_argument(
        "--select", choices=("last", "selected", "averaged"), default="last"
    )
    ap.add_argument("--against", nargs="+", default=[], help="method run folders")
    ap.add_argument("--units", type=Path, default=None, help="keep the row's units")
    ap.add_argument("overrides", nargs="*", help="extra key=value for every run")
    args = ap.parse_intermixed_args()
    split_overrides(args, ("metrics", "against"))
    try:
        cfg = resolve(
            args.config, args.variant, [*args.overrides, f"output_dir={args.out}"]
        )
        cells = plan(cfg)
        t0 = time.perf_counter()
        run_all(cfg, cells, args.jobs)
    except (ConfigError, ResumeError) as e:
        raise SystemExit(str(e)) from None
    print(f"{len(cells)} local runs ready in {time.perf_counter() - t0:.0f} s\n")
    rows, alone = local_rows(cfg, args.metrics, args.select)
    if args.units is not None:
        held = keep_units(args.units, rows, args.select)
        print(f"{len(rows)} local units written to {args.units} ({held} in all)\n")
    targets = list(dict.fromkeys(t for t, _, _ in cells))
    for m in args.metrics:
        print(f"{m} (%) at the held-out domain, local-only, mean ± std over seeds\n")
        print("| " + " | ".join([*targets, "Avg"]) + " |")
        print("|" + "---:|" * (len(targets) + 1))
        by = {(r.target, r.seed): 100 * r.metrics[m] for r in rows if m in r.metrics}
        per = [mean_std([v for (t, _), v in by.items() if t == tg]) for tg in targets]
        avg = [np.mean([by[(t, s)] for t in targets]) for s in cfg.seeds]
        print("| " + " | ".join([*per, mean_std([float(a) for a in avg])]) + " |\n")
    print(f"each hospital alone, {args.metrics[0]} (%), mean over seeds:")
    for (target, source), v in sorted(alone.items()):
        print(f"  {source} -> {target}: {np.mean(v):.2f} ({len(v)} seeds)")
    for folder in args.against:
        theirs = collect_rows([Path(folder)], "target", args.select)
        for method in sorted({r.method for r in theirs}):
            print(f"\n{method} ({folder}) minus local-only, paired over units:")
            for m in args.metrics:
                line = compare([*rows, *theirs], method, LOCAL, m).line()
                print("  " + line)
    # run folders are <name>/<label>/<target>/seed<k>
    walls = [
        run_wall(d)
        for d in find_runs([Path(cfg.output_dir)])
        if d.parent.parent.name.startswith(f"{LOCAL}_")
    ]
    print(
        f"\nwall time per local run: {np.mean(walls):.0f} s "
        f"({min(walls):.0f}-{max(walls):.0f}), {sum(walls) / 3600:.2f} h in all"
    )


if __name__ == "__main__":
    main()
