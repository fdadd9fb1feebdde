"""FedAD's central claim on a benchmark where it could show (issue 40).

Six synthetic hospitals at 32 px, an ImageNet EfficientNet-Lite0 start, the
paper's federation (K = 6 clients, M = 4 per round) and Sec. 5.3.2's probe
(``configs/claims/fedad_synthetic.yaml``). Four role sets say which hospitals
train (self-supervised, no labels), which two fit the logistic-regression probe
on the frozen encoder, and which one tests it; x seeds 0-4 = 20 paired
(held-out hospital, seed) units per method. Runs are resumable (finished ones
are kept; run the command again to go on). Prints the methods x held-out
hospital table (F1 and balanced accuracy) and every method paired with
FedAvg-SSL (``fedpath compare``'s statistics).

    python benchmarks/bench_fedad_claim.py --methods fedavg_ssl fedprox_ssl  # power
    python benchmarks/bench_fedad_claim.py --methods fedad moon             # claim

A ``key=value`` after ``--methods`` overrides every run's config.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _common import setup_threads, split_overrides

from fedpath.cli import main as fedpath
from fedpath.config import ExperimentConfig, load_config
from fedpath.runtime.experiment import run_experiment

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs/claims/fedad_synthetic.yaml"
#: (held-out hospital, the two hospitals that fit the probe); the other three train
ROLES = (
    ("hospital_2", ("hospital_0", "hospital_1")),
    ("hospital_5", ("hospital_3", "hospital_4")),
    ("hospital_0", ("hospital_4", "hospital_5")),
    ("hospital_3", ("hospital_1", "hospital_2")),
)
FEDAD = "algorithm.name=fedad"
VARIANTS: dict[str, list[str]] = {
    "fedavg_ssl": ["algorithm.name=fedavg_ssl"],
    "fedprox_ssl": ["algorithm.name=fedprox_ssl"],
    "moon": ["algorithm.name=moon"],
    "feddis": ["algorithm.name=feddis"],
    "feddg": ["algorithm.name=elcfs"],
    "central_simclr": ["algorithm.name=central_simclr"],
    "central_supervised": ["algorithm.name=central_supervised"],
    "fedad": [FEDAD],  # the paper's configuration: every parameter at its default
    "no_orthogonality": [FEDAD, "algorithm.params.gamma=0.0"],
    "no_atsa": [
        FEDAD,
        "algorithm.params.atsa=false",
        "algorithm.params.static_lambda=0.5",
    ],
    "gamma_0_5": [FEDAD, "algorithm.params.gamma=0.5"],
    "gamma_1": [FEDAD, "algorithm.params.gamma=1.0"],
    "gamma_4": [FEDAD, "algorithm.params.gamma=4.0"],
}


def role_configs(
    method: str, out: Path, overrides: list[str]
) -> list[ExperimentConfig]:
    """One config per role set for ``method``, written under ``out``."""
    return [
        load_config(
            CONFIG,
            [
                *VARIANTS[method],
                f"lodo.targets=[{target}]",
                f"evaluation.probe_train=[{probe[0]},{probe[1]}]",
                f"output_dir={out}",
                f"label={method}",
                *overrides,
            ],
        )
        for target, probe in ROLES
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("runs/claims"))
    ap.add_argument("--methods", nargs="+", default=["fedavg_ssl", "fedprox_ssl"])
    ap.add_argument("--baseline", default="fedavg_ssl")
    ap.add_argument(
        "--roles",
        nargs="+",
        type=int,
        help="run only these role sets (1-4; default all): two processes can "
        "share a method's runs without running the same one",
    )
    ap.add_argument("overrides", nargs="*", default=[])
    args = ap.parse_args(argv)
    split_overrides(args, ("methods",))
    unknown = [m for m in args.methods if m not in VARIANTS]
    if unknown:
        ap.error(f"unknown method {unknown[0]!r}; choose from {', '.join(VARIANTS)}")
    setup_threads()
    for method in args.methods:
        for i, cfg in enumerate(role_configs(method, args.out, args.overrides)):
            if args.roles and i + 1 not in args.roles:
                continue
            print(
                f"{method}: role set {i + 1}/{len(ROLES)}", file=sys.stderr, flush=True
            )
            run_experiment(cfg, resume=True)
    folder = str(args.out / load_config(CONFIG).name)
    code = 0
    for metric in ("f1", "balanced_accuracy"):
        print(f"\n{metric} (%) of the probe at the held-out hospital (Sec. 5.3.2)")
        code = code or fedpath(["table", folder, "--metric", metric])
        code = code or fedpath(
            ["compare", folder, "--baseline", args.baseline, "--metric", metric]
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
