"""Accuracy of methods at an unseen hospital: runs a suite and prints its tables.

Default: FedAvg, FedCCRL and FedStain on the synthetic hospitals
(configs/synthetic_methods.yaml), leave-one-hospital-out, seeds 0-2, 8 rounds:

    python benchmarks/bench_methods.py
    python benchmarks/bench_methods.py --suite configs/amibr_methods.yaml \\
        --metric balanced_accuracy --methods fedavg,fedccrl,fedstain
    python benchmarks/bench_methods.py --suite configs/fedhd/methods.yaml \\
        --methods all seeds=[0,1,2]      # FedHD: clients x methods, suite's metrics

Results go to a fresh directory (``--out``, default a temporary one); the tables
printed are mean ± std over seeds per target with the Avg column.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import setup_threads

from fedpath.cli import main as fedpath_main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--suite", default="configs/synthetic_methods.yaml")
    ap.add_argument("--methods", default="fedavg,fedccrl,fedstain", help="or 'all'")
    ap.add_argument("--metric", default=None, help="default: the suite's metrics")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep finished runs in --out and continue the others",
    )
    ap.add_argument("overrides", nargs="*", default=["seeds=[0,1,2]", "train.rounds=8"])
    args = ap.parse_args()
    setup_threads()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        code = fedpath_main(
            [
                "suite",
                args.suite,
                *args.overrides,
                f"output_dir={out}",
                *(["--only", args.methods] if args.methods != "all" else []),
                *(["--metric", args.metric] if args.metric else []),
                "--quiet",
            ]
        )
    raise SystemExit(code)


if __name__ == "__main__":
    main()
