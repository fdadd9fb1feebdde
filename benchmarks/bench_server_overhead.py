"""Server work per round (aggregation, bookkeeping, checkpoint) as a share of a round.

Runs one leave-one-hospital-out fold of FedAvg with the small CNN on the synthetic
hospitals and reads the per-round timing records the runtime writes to
results.jsonl. Target: server share <= 2% of the round time.

    python benchmarks/bench_server_overhead.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import tempfile

from _common import setup_threads

from fedpath.config import load_config
from fedpath.runtime.experiment import run_dir_for, run_experiment


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--algorithm", default="fedavg")
    args = ap.parse_args()
    setup_threads()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(
            None,
            [
                f"output_dir={tmp}",
                "seeds=[0]",
                "lodo.targets=[hospital_0]",
                f"train.rounds={args.rounds}",
                "train.local_epochs=1",
                f"algorithm.name={args.algorithm}",
                "data.params.image_size=64",
            ],
        )
        run_experiment(cfg)
        lines = (run_dir_for(cfg, "hospital_0", 0) / "results.jsonl").read_text()
        timing = [json.loads(x) for x in lines.splitlines() if '"timing"' in x]
        size = (run_dir_for(cfg, "hospital_0", 0) / "checkpoint.pt").stat().st_size
    print(
        f"{args.algorithm}, small CNN 64px, 6 clients, {args.rounds} rounds; "
        f"checkpoint {size / 2**20:.2f} MiB"
    )
    print("round  clients_s  server_s  checkpoint_s  eval_s  server+ckpt share")
    shares = []
    for t in timing:
        total = t["client_s"] + t["server_s"] + t["checkpoint_s"] + t["eval_s"]
        share = (t["server_s"] + t["checkpoint_s"]) / total
        shares.append(share)
        print(
            f"{t['round']:>5}  {t['client_s']:9.3f}  {t['server_s']:8.4f}  "
            f"{t['checkpoint_s']:12.4f}  {t['eval_s']:6.3f}  {100 * share:6.2f}%"
        )
    mean = 100 * sum(shares) / len(shares)
    print(f"mean server+checkpoint share of round time: {mean:.2f}%  (target <= 2%)")


if __name__ == "__main__":
    main()
