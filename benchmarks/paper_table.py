"""One command per paper table: run a paper's suite and print the table in the
paper's layout with fedpath's paired intervals.

    python benchmarks/paper_table.py fedstain-camelyon17 data.root=/path/camelyon17_v1.0
    python benchmarks/paper_table.py fedstain-mvmidog data.root=/path/mvmidog --jobs 2

Each table names a suite under ``configs/paper/`` (the paper's hyper-parameters,
its methods, its folds and seeds). The suite runs with ``--resume`` (a crash or a
stop loses at most a round; run the command again to go on), then the script
prints the paper's table (methods x held-out domain, mean ± std over seeds, Avg)
and every method paired with FedAvg over the same (held-out domain, seed) units
(mean difference, bootstrap 95% interval, sign-flip test, verdict). Overrides
(``key=value``) apply to every method: ``data.root`` is the dataset's folder
(Camelyon17-WILDS: the ``camelyon17_v1.0`` folder with ``metadata.csv``;
MvMidog: the output of ``fedpath mvmidog``, built from the MIDOG 2021 JSON and
TIFFs); ``--only fedavg,fedstain`` runs a subset of the methods.

The FedHD slide-feature table (CAMELYON16 / TCGA-IDH from CLAM h5 files) and
FedAD's probe table have no command yet (docs/reproduction.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedpath.cli import main as fedpath
from fedpath.runtime.suite import load_suite

ROOT = Path(__file__).resolve().parents[1]
#: table -> (suite, the paper's metric, the paper's table)
TABLES = {
    "fedstain-camelyon17": (
        "configs/paper/camelyon17_resnet18_methods.yaml",
        "accuracy",
        "FedStain Table III (Camelyon17-WILDS, ResNet-18)",
    ),
    "fedstain-camelyon17-resnet50": (
        "configs/paper/camelyon17_resnet50_methods.yaml",
        "accuracy",
        "FedStain Table III (Camelyon17-WILDS, ResNet-50)",
    ),
    "fedstain-mvmidog": (
        "configs/paper/mvmidog_resnet18_methods.yaml",
        "accuracy",
        "FedStain Table IV (MvMidog, ResNet-18)",
    ),
    "fedstain-mvmidog-resnet50": (
        "configs/paper/mvmidog_resnet50_methods.yaml",
        "accuracy",
        "FedStain Table IV (MvMidog, ResNet-50)",
    ),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("table", choices=sorted(TABLES))
    ap.add_argument("overrides", nargs="*", help="key=value for every method")
    ap.add_argument("--only", help="comma-separated subset of the methods")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time")
    ap.add_argument("--baseline", default="fedavg")
    args = ap.parse_args(argv)
    suite, metric, title = TABLES[args.table]
    path = ROOT / suite
    only = args.only.split(",") if args.only else None
    _, configs = load_suite(path, args.overrides, only)
    out = Path(configs[0].output_dir) / configs[0].name
    launch = ["--launcher", "local", "--jobs", str(args.jobs)] if args.jobs > 1 else []
    run = ["suite", str(path), "--resume", *launch, *args.overrides]
    if args.only:
        run += ["--only", args.only]
    code = fedpath(run)
    if code:
        return code
    print(f"\n{title}: {metric} (%) at the held-out domain, mean ± std over seeds")
    code = fedpath(["table", str(out), "--metric", metric])
    if code or args.baseline not in {c.method for c in configs}:
        return code
    print(f"\npaired with {args.baseline} over (held-out domain, seed) units")
    return fedpath(
        ["compare", str(out), "--baseline", args.baseline, "--metric", metric]
    )


if __name__ == "__main__":
    sys.exit(main())
