"""Does the stain shift matter? FedAvg's accuracy on its source hospitals vs unseen.

Leave-one-hospital-out FedAvg on the synthetic hospitals (the demo's settings),
several seeds. For every held-out hospital: accuracy on the source hospitals' test
splits (in-distribution) and on the unseen hospital. A clear gap means the
synthetic shift is a real domain-generalization problem.

    python benchmarks/bench_synthetic_shift.py [--seeds 0 1 2] [--algorithm fedavg]
"""

from __future__ import annotations

import argparse
import tempfile
from importlib import resources
from pathlib import Path

import numpy as np
from _common import setup_threads

from fedpath.config import load_config
from fedpath.runtime.experiment import collect_rows, run_experiment


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--algorithm", default="fedavg")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    setup_threads()
    demo = Path(str(resources.files("fedpath") / "configs" / "demo_base.yaml"))
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(
            demo,
            [
                f"output_dir={tmp}",
                f"seeds={args.seeds}",
                f"algorithm.name={args.algorithm}",
                *args.overrides,
            ],
        )
        run_experiment(cfg)
        target = collect_rows([Path(tmp)], "target")
        source = collect_rows([Path(tmp)], "source_mean")
    print(
        f"{args.algorithm}, demo settings, seeds {args.seeds}: accuracy (%) "
        "mean ± std over seeds"
    )
    print("unseen hospital | source test (in-distribution) | unseen hospital | gap")
    gaps = []
    for t in dict.fromkeys(r.target for r in target):
        s = np.array([100 * r.metrics["accuracy"] for r in source if r.target == t])
        u = np.array([100 * r.metrics["accuracy"] for r in target if r.target == t])
        gaps.append(s.mean() - u.mean())
        print(
            f"{t:>15} | {s.mean():6.2f} ± {s.std(ddof=1) if len(s) > 1 else 0:5.2f}"
            f"               | {u.mean():6.2f} ± "
            f"{u.std(ddof=1) if len(u) > 1 else 0:5.2f} | {gaps[-1]:+6.2f}"
        )
    print(f"mean gap source - unseen: {np.mean(gaps):+.2f} points")


if __name__ == "__main__":
    main()
