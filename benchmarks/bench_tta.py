"""Test-time augmentation measured after the fact on finished runs.

For every run under the given directories (``model.fpm`` + ``config.yaml``):
the unseen domain's balanced accuracy and AUROC with the model as trained and
with ``tta: dihedral`` (the mean softmax over the 8 flips and 90-degree turns),
on the run's own evaluation split, read from the run's data (AMi-Br:
``FEDPATH_AMIBR``). Argmax decisions (no operating point) for both.

    FEDPATH_AMIBR=/path/to/amibr python benchmarks/bench_tta.py runs/amibr_lite0 \\
        --methods fedavg fedstain
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import yaml

from fedpath.artifact import load_model
from fedpath.config import build_config
from fedpath.evaluation.metrics import classification_metrics
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks.images import predict_probs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--methods", nargs="*", help="only these methods")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows: dict[str, list[tuple[str, int, dict, dict]]] = defaultdict(list)
    datasets: dict[str, object] = {}
    for root in args.paths:
        for fpm in sorted(root.rglob("model.fpm")):
            run = fpm.parent
            raw = yaml.safe_load((run / "config.yaml").read_text())
            cfg = build_config(raw)
            if args.methods and cfg.method not in args.methods:
                continue
            key = repr(cfg.data)
            if key not in datasets:
                datasets[key] = load_dataset(cfg.data)
            ds = datasets[key]
            target, seed = run.parent.name, int(run.name[4:])
            split = ds.split(target, cfg.lodo.eval_split)  # type: ignore[attr-defined]
            model = load_model(fpm)
            t0 = time.perf_counter()
            out = {}
            for tta in ("none", "dihedral"):
                probs = predict_probs(model.model, split, 64, torch.device("cpu"), tta)
                p = probs.double().numpy()
                m = classification_metrics(split.labels, p, p.argmax(1))
                out[tta] = m
            rows[cfg.method].append((target, seed, out["none"], out["dihedral"]))
            print(
                f"{cfg.method:10s} {target:24s} seed {seed}: balanced accuracy "
                f"{100 * out['none']['balanced_accuracy']:.2f} -> "
                f"{100 * out['dihedral']['balanced_accuracy']:.2f}, AUROC "
                f"{100 * out['none']['auroc']:.2f} -> "
                f"{100 * out['dihedral']['auroc']:.2f} "
                f"({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    print("\nmean over runs (balanced accuracy / AUROC, %): plain -> dihedral TTA")
    for method, rs in rows.items():
        ba0 = np.mean([r[2]["balanced_accuracy"] for r in rs]) * 100
        ba1 = np.mean([r[3]["balanced_accuracy"] for r in rs]) * 100
        au0 = np.mean([r[2]["auroc"] for r in rs]) * 100
        au1 = np.mean([r[3]["auroc"] for r in rs]) * 100
        print(
            f"  {method}: {ba0:.2f} -> {ba1:.2f} / {au0:.2f} -> {au1:.2f} "
            f"({len(rs)} runs)"
        )


if __name__ == "__main__":
    main()
