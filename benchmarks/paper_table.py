"""One command per paper table: run a paper's suite and print the table in the
paper's layout with fedpath's paired intervals.

    python benchmarks/paper_table.py fedstain-camelyon17 data.root=/path/camelyon17_v1.0
    python benchmarks/paper_table.py fedstain-mvmidog data.root=/path/mvmidog --jobs 2
    python benchmarks/paper_table.py fedhd-camelyon16 data.root=/path/c16/r50 \\
        algorithm.params.features.utrecht.root=/path/c16/uni
    python benchmarks/paper_table.py fedad-camelyon17 data.root=/path/camelyon17_v1.0

Each table names a suite under ``configs/paper/`` (the paper's hyper-parameters,
its methods, its folds and seeds). The suite runs with ``--resume`` (a crash or a
stop loses at most a round; run the command again to go on), then the script
prints the paper's table (mean ± std over seeds, Avg) for each of the paper's
metrics and every method paired with the table's baseline over the same units
(mean difference, bootstrap 95% interval, paired test, verdict). Units are
(held-out domain, seed) for the FedStain and FedAD tables, (hospital, seed) for
FedHD's, where every hospital is scored on its own test slides. Overrides
(``key=value``) apply to every method: ``data.root`` is the dataset's folder
(Camelyon17-WILDS: the ``camelyon17_v1.0`` folder with ``metadata.csv``;
MvMidog: the output of ``fedpath mvmidog``, built from the MIDOG 2021 JSON and
TIFFs; FedHD: a CLAM feature folder, ``h5_files/`` and ``slides.csv``, with
the other extractors' folders as ``algorithm.params.features.<hospital>.root``);
``--only fedavg,fedstain`` runs a subset of the methods.

FedHD's TCGA-IDH rows have no command: the paper gives no client layout for
them (docs/reproduction.md).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from fedpath.cli import main as fedpath
from fedpath.runtime.suite import load_suite

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Table:
    """A paper table: its suite, title, metrics (the first is the headline),
    the split it reads (``target``: the held-out domain; ``clients``: every
    hospital on its own test data) and the method every other is paired with."""

    suite: str
    title: str
    metrics: tuple[str, ...] = ("accuracy",)
    split: str = "target"
    baseline: str = "fedavg"


_C17 = "Camelyon17-WILDS"
TABLES = {
    "fedstain-camelyon17": Table(
        "configs/paper/camelyon17_resnet18_methods.yaml",
        f"FedStain Table III ({_C17}, ResNet-18)",
    ),
    "fedstain-camelyon17-resnet50": Table(
        "configs/paper/camelyon17_resnet50_methods.yaml",
        f"FedStain Table III ({_C17}, ResNet-50)",
    ),
    "fedstain-mvmidog": Table(
        "configs/paper/mvmidog_resnet18_methods.yaml",
        "FedStain Table IV (MvMidog, ResNet-18)",
    ),
    "fedstain-mvmidog-resnet50": Table(
        "configs/paper/mvmidog_resnet50_methods.yaml",
        "FedStain Table IV (MvMidog, ResNet-50)",
    ),
    "fedhd-camelyon16": Table(
        "configs/paper/fedhd_camelyon16_methods.yaml",
        "FedHD main table (CAMELYON16, [extractor + MIL] per hospital)",
        ("accuracy", "mcc"),
        "clients",
        "fedwsidd",
    ),
    "fedhd-camelyon17": Table(
        "configs/paper/fedhd_camelyon17_methods.yaml",
        "FedHD main table (CAMELYON17, [extractor + MIL] per hospital)",
        ("accuracy", "mcc"),
        "clients",
        "fedwsidd",
    ),
    "fedad-camelyon17": Table(
        "configs/paper/fedad_camelyon17_methods.yaml",
        f"FedAD Table 6 ({_C17}, linear probe at the unseen hospital)",
        ("f1", "precision", "recall", "auroc"),
        baseline="fedavg_ssl",
    ),
    "fedad-camelyon17-ablations": Table(
        "configs/paper/fedad_camelyon17_ablations.yaml",
        f"FedAD Tables 3-4 ({_C17}, ablations and gamma)",
        ("f1", "auroc"),
        baseline="fedavg_ssl",
    ),
}
WHERE = {"target": "at the held-out domain", "clients": "at each hospital"}
UNITS = {"target": "(held-out domain, seed)", "clients": "(hospital, seed)"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("table", choices=sorted(TABLES))
    ap.add_argument("overrides", nargs="*", help="key=value for every method")
    ap.add_argument("--only", help="comma-separated subset of the methods")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time")
    ap.add_argument("--baseline", help="the method paired with (default: the table's)")
    args = ap.parse_args(argv)
    tab = TABLES[args.table]
    baseline = args.baseline or tab.baseline
    path = ROOT / tab.suite
    only = args.only.split(",") if args.only else None
    _, configs = load_suite(path, args.overrides, only)
    out = Path(configs[0].output_dir) / configs[0].name
    launch = ["--launcher", "local", "--jobs", str(args.jobs)] if args.jobs > 1 else []
    run = ["suite", str(path), "--resume", "--no-table", *launch, *args.overrides]
    if args.only:
        run += ["--only", args.only]
    code = fedpath(run)
    split = ["--split", tab.split]
    for metric in tab.metrics:
        if code:
            return code
        print(f"\n{tab.title}: {metric} (%) {WHERE[tab.split]}, mean ± std over seeds")
        code = fedpath(["table", str(out), "--metric", metric, *split])
    if code or baseline not in {c.method for c in configs}:
        return code
    for metric in tab.metrics:
        print(f"\n{metric}: paired with {baseline} over {UNITS[tab.split]} units")
        code = code or fedpath(
            ["compare", str(out), "--baseline", baseline, "--metric", metric, *split]
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
