"""FedAD's probe quality on an unseen hospital: FedAD vs FedAvg-SSL vs MOON, ablations.

For every seed, runs federated self-supervised pre-training on the synthetic
hospitals (``fedpath/configs/demo_fedad_base.yaml`` unless ``--config``; the
held-out hospital never trains) for FedAD, FedAvg-SSL, MOON and the two FedAD
ablations of Table 4 (gamma = 0; static lambda = 0.5), then linear-probes the
frozen encoder on the held-out hospital (5-fold CV logistic regression). A
random-init encoder (no training at all) is probed too: the floor any method
must beat. Prints F1 / AUROC mean +- sd over seeds and the per-seed F1, and
writes ``OUT/bench_fedad.json``. Runs are resumable (finished runs are skipped).

    python benchmarks/bench_fedad.py --seeds 0 1 2          # ~ minutes, 1 thread
    python benchmarks/bench_fedad.py --config configs/fedad_synthetic.yaml

Threads: ``FEDPATH_BENCH_THREADS`` (default 2; use 1 on a shared machine).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import setup_threads

from fedpath.algorithms.base import derive_seed
from fedpath.config import load_config
from fedpath.evaluation.probe import linear_probe
from fedpath.models.backbones import build_model
from fedpath.runtime.experiment import load_dataset, run_experiment
from fedpath.tasks.images import encode_images

ROOT = Path(__file__).resolve().parents[1]
VARIANTS: dict[str, list[str]] = {
    "fedavg_ssl": ["algorithm.name=fedavg_ssl"],
    "moon": ["algorithm.name=moon"],
    "fedad": ["algorithm.name=fedad"],
    "fedad_no_ortho": ["algorithm.name=fedad", "algorithm.params.gamma=0.0"],
    "fedad_no_atsa": [
        "algorithm.name=fedad",
        "algorithm.params.atsa=false",
        "algorithm.params.static_lambda=0.5",
    ],
}


def random_init_probe(cfg: Any, seed: int) -> dict[str, Any]:
    """Probe of an untrained encoder (same init as the runs of ``seed``)."""
    ds = load_dataset(cfg.data)
    target = cfg.lodo.targets[0]
    torch.manual_seed(derive_seed(seed, "init"))
    model = build_model(cfg.model, ds.num_classes)
    dev = torch.device("cpu")
    tr, te = ds.split(target, "train"), ds.split(target, "test")
    ev = cfg.evaluation
    return linear_probe(
        encode_images(model, tr, 256, dev),
        tr.labels,
        encode_images(model, te, 256, dev),
        te.labels,
        folds=ev.probe_folds,
        max_iter=ev.probe_max_iter,
        cs=ev.probe_cs,
        l2=ev.probe_l2,
        seed=derive_seed(seed, "probe"),
        where=target,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--config", type=Path, default=ROOT / "fedpath/configs/demo_fedad_base.yaml"
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/out/fedad")
    ap.add_argument("--only", nargs="*", default=None, help="subset of the variants")
    ap.add_argument("overrides", nargs="*", help="config overrides for every run")
    args = ap.parse_args()
    threads = setup_threads()
    names = args.only or list(VARIANTS)
    results: dict[str, dict[int, dict[str, Any]]] = {n: {} for n in names}
    results["random_init"] = {}
    for seed in args.seeds:
        for name in names:
            cfg = load_config(
                args.config,
                [
                    *VARIANTS[name],
                    *args.overrides,
                    f"seeds=[{seed}]",
                    f"output_dir={args.out}",
                    f"label={name}",
                    f"runtime.threads={threads}",
                ],
            )
            (record,) = run_experiment(cfg, resume=True)
            results[name][seed] = record["evaluation"]["target"]
            print(
                f"seed {seed} {name:15s} f1 {results[name][seed]['f1']:.3f}", flush=True
            )
        results["random_init"][seed] = random_init_probe(cfg, seed)
    print(
        f"\nlinear probe on the unseen {cfg.lodo.targets[0]} ({args.config.name}, "
        f"{cfg.train.rounds} rounds, seeds {args.seeds}, {threads} threads)"
    )
    print(f"| method | F1 | AUROC | balanced acc. | per-seed F1 |\n|{'---|' * 5}")
    summary: dict[str, Any] = {}
    for name, by_seed in results.items():
        f1 = np.array([m["f1"] for m in by_seed.values()])
        # NaN when undefined; null in results written before that convention
        auc = np.array(
            [np.nan if m["auroc"] is None else m["auroc"] for m in by_seed.values()]
        )
        bacc = np.array([m["balanced_accuracy"] for m in by_seed.values()])
        per = ", ".join(f"{v:.3f}" for v in f1)
        print(
            f"| {name} | {f1.mean():.3f} +- {f1.std(ddof=1) if len(f1) > 1 else 0:.3f} "
            f"| {np.nanmean(auc):.3f} | {bacc.mean():.3f} | {per} |"
        )
        summary[name] = {
            "f1": f1.tolist(),
            "auroc": auc.tolist(),
            "bacc": bacc.tolist(),
        }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_fedad.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
