"""Memory across rounds with 100 simulated clients of the small CNN in one process.

The runtime builds each client's model when the client runs and frees it after, so
resident memory must stay flat across rounds and far below 100 live models plus
optimizer state. Prints RSS after every round.

    python benchmarks/bench_memory_clients.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import tempfile
from pathlib import Path

from _common import peak_rss_mib, rss_mib, setup_threads

from fedpath.config import load_config
from fedpath.data.partition import lodo_plan
from fedpath.models.backbones import build_model
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.inprocess import InProcessRun
from fedpath.utils.progress import Reporter


class RssReporter(Reporter):
    def __init__(self) -> None:
        self.rss: list[float] = []

    def end_round(self, summary: str = "") -> None:
        gc.collect()
        self.rss.append(rss_mib())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    setup_threads()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(
            None,
            [
                f"output_dir={tmp}",
                "data.params.num_hospitals=6",
                "data.params.samples_per_hospital=400",
                "data.params.image_size=32",
                "partition.clients_per_domain=20",
                "partition.alpha=1.0",
                f"train.rounds={args.rounds}",
                "train.local_epochs=1",
                "lodo.source_eval=false",
            ],
        )
        ds = load_dataset(cfg.data)
        fold = lodo_plan(ds, [ds.domains[0]])[0]
        rep = RssReporter()
        start = rss_mib()
        run = InProcessRun(cfg, ds, fold, 0, Path(tmp) / "run", rep)
        run.run()
    model = build_model(cfg.model, ds.num_classes)
    params = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    print(
        f"{len(run.clients)} clients, small CNN ({params / 2**20:.2f} MiB of "
        f"weights; 100 live models + Adam state would be "
        f"~{300 * params / 2**20:.0f} MiB)"
    )
    print(f"RSS before the run: {start:.0f} MiB")
    for i, r in enumerate(rep.rss, 1):
        print(f"  after round {i}: {r:.0f} MiB")
    growth = rep.rss[-1] - rep.rss[0]
    print(
        f"growth from round 1 to {len(rep.rss)}: {growth:+.1f} MiB; "
        f"peak RSS {peak_rss_mib():.0f} MiB"
    )


if __name__ == "__main__":
    main()
