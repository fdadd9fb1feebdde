"""DP-FedAvg: accuracy at the unseen hospital against the client-level epsilon.

The synthetic hospitals at the demo's data size, small CNN with GroupNorm (no
BatchNorm statistics to leak), FedAvg without DP beside DP-FedAvg with the update
clipped to ``--clip`` and noise multipliers ``--noise``; every client takes part
in every round (q = 1), delta = 1e-5. Prints accuracy per held-out hospital and
the epsilon after the last round.

    python benchmarks/bench_dp.py [--folds hospital_0 hospital_3] [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from fedpath.cli import main as fedpath_main
from fedpath.runtime.experiment import collect_rows, find_runs


def _epsilon(folder: Path) -> str:
    """The last round's epsilon of the first run under ``folder`` (null: inf)."""
    run = find_runs([folder])[0]
    rounds = [
        json.loads(line)
        for line in (run / "results.jsonl").read_text().splitlines()
        if '"kind": "round"' in line
    ]
    eps = rounds[-1].get("fit/epsilon")
    return "inf" if eps is None else f"{eps:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--folds", nargs="+", default=["hospital_0", "hospital_3"])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.5, 1.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench_dp"))
    args = ap.parse_args()
    base = (
        Path(__file__).resolve().parents[1] / "fedpath" / "configs" / "demo_base.yaml"
    )
    common = [
        "model.params.norm=group",
        f"train.rounds={args.rounds}",
        f"lodo.targets=[{','.join(args.folds)}]",
        f"seeds=[{','.join(map(str, args.seeds))}]",
        f"output_dir={args.out}",
        "runtime.threads=1",
    ]
    settings = [("fedavg (no DP)", ["algorithm.name=fedavg"])]
    for z in args.noise:
        settings.append(
            (
                f"dp_fedavg z={z:g}",
                [
                    "algorithm.name=dp_fedavg",
                    f"algorithm.params.clip={args.clip}",
                    f"algorithm.params.noise_multiplier={z}",
                ],
            )
        )
    print(
        f"synthetic hospitals, small CNN + GroupNorm, {args.rounds} rounds, clip "
        f"{args.clip}, q = 1, delta = 1e-5, folds {args.folds}, seeds {args.seeds}"
    )
    print("\n| setting | accuracy (%) per fold | mean | epsilon |")
    print("|---|---|---:|---:|")
    for label, over in settings:
        name = "dp_" + label.split()[0] + label.split()[-1].replace("=", "")
        t0 = time.perf_counter()
        code = fedpath_main(
            ["run", str(base), *common, *over, f"name={name}", "--quiet"]
        )
        if code != 0:
            raise SystemExit(f"{label}: fedpath run failed ({code})")
        rows = collect_rows([args.out / name])
        acc = [100 * float(r.metrics["accuracy"]) for r in rows]
        shown = _epsilon(args.out / name) if over[0].endswith("dp_fedavg") else "-"
        per = ", ".join(f"{a:.2f}" for a in acc)
        wall = time.perf_counter() - t0
        print(f"| {label} | {per} | {np.mean(acc):.2f} | {shown} |  ({wall:.0f} s)")


if __name__ == "__main__":
    main()
