"""Seed ensembles as one model file (``fedpath ensemble``), measured on finished
runs: per held-out domain, the ensemble of the seeds' ``model.fpm`` against each
member alone at the unseen domain, and what the ensemble costs at prediction.

For every held-out domain folder under RUN (``RUN/<domain>/seed<k>/model.fpm``
with its ``config.yaml``) the seeds' models are written as one ensemble file
(:func:`fedpath.ensemble.save_ensemble`, in a temporary folder) and scored on the
run's own evaluation split of that domain (argmax; balanced accuracy and
AUROC), beside each member. The paired unit is the held-out domain: the
ensemble minus the mean of its members, with a bootstrap interval and the exact
sign-flip test (:mod:`fedpath.evaluation.paired`). Wall time per image of one
member and of the ensemble is measured in the same process, one after the
other, so their ratio is the cost.

``--split validation`` scores them on the sources' validation slides instead,
which a recipe may choose on: the members must have held out the same slides
(``partition.validation_seed`` fixed), so none of them trained on a slide the
ensemble is scored on.

    FEDPATH_AMIBR=/path/to/amibr python benchmarks/bench_ensemble.py \\
        runs/recipe/amibr_lite0_tail/fedavg [--tta dihedral]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from fedpath.config import ExperimentConfig, build_config
from fedpath.data.base import Split
from fedpath.data.partition import lodo_plan, make_clients
from fedpath.ensemble import EnsembleNet, save_ensemble
from fedpath.evaluation.metrics import classification_metrics
from fedpath.evaluation.paired import bootstrap_ci, sign_flip_p
from fedpath.loading import load_model
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks.images import predict_probs


def _score(
    model_file: Path, split: object, batch: int, tta: str | None
) -> tuple[dict, float]:
    """Metrics of the file's model on ``split`` and seconds per image; ``tta``
    (``--tta``) replaces what the file (or each member of an ensemble) says."""
    model = load_model(model_file)
    view = model.meta.tta
    if tta is not None and isinstance(model.model, EnsembleNet):
        model.model.tta = [tta] * len(model.model.tta)
    elif tta is not None:
        view = tta
    cpu = torch.device("cpu")
    t0 = time.perf_counter()
    raw = predict_probs(model.model, split, batch, cpu, view)  # type: ignore[arg-type]
    probs = model.calibrate(raw.double().numpy())
    seconds = (time.perf_counter() - t0) / len(split.labels)  # type: ignore[attr-defined]
    labels = split.labels  # type: ignore[attr-defined]
    return classification_metrics(labels, probs, probs.argmax(1)), seconds


def validation_split(configs: list[ExperimentConfig], target: str) -> Split:
    """The validation slides of the fold holding out ``target``, which every
    member must share: a fixed ``partition.validation_seed``, the same
    ``partition`` and data."""
    cfg = configs[0]
    if cfg.partition.validation_seed is None:  # needs validation > 0 (config)
        raise SystemExit(
            f"--split validation: the runs holding out {target} have no shared "
            "validation slides; train the members with partition.validation > 0 "
            "and a fixed partition.validation_seed"
        )
    if any(c.partition != cfg.partition or c.data != cfg.data for c in configs):
        raise SystemExit(
            f"--split validation: the seeds holding out {target} differ in "
            "partition or data (their partition.validation_seed must match)"
        )
    dataset = load_dataset(cfg.data)
    [fold] = lodo_plan(dataset, [target])
    clients = make_clients(dataset, fold.sources, cfg.partition, cfg.seeds[0])
    return Split.concat([c.validation for c in clients if c.validation is not None])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run", type=Path, help="a method's folder: <domain>/seed<k>/")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--tta",
        choices=["none", "dihedral"],
        default=None,
        help="score members and ensemble with this test-time augmentation "
        "instead of what their files say",
    )
    ap.add_argument(
        "--split",
        choices=["target", "validation"],
        default="target",
        help="target: the held-out domain (the run's evaluation split); "
        "validation: the sources' validation slides (partition.validation_seed)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    diffs, costs = [], []
    tmp = Path(tempfile.mkdtemp(prefix="fedpath-ensemble-"))
    where = {"target": "the held-out domain", "validation": "the sources' validation"}
    print(f"scored on {where[args.split]} slides\n")
    print(
        "| held-out domain | members (BA %) | member mean | ensemble | diff "
        "| AUROC member mean / ensemble |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for domain in sorted(p for p in args.run.iterdir() if p.is_dir()):
        files = sorted(domain.glob("seed*/model.fpm"))
        if len(files) < 2:
            print(f"{domain.name}: {len(files)} finished seed(s); skipped")
            continue
        configs = [
            build_config(yaml.safe_load((f.parent / "config.yaml").read_text()))
            for f in files
        ]
        cfg = configs[0]
        if args.split == "validation":
            split = validation_split(configs, domain.name)
        else:
            split = load_dataset(cfg.data).split(domain.name, cfg.lodo.eval_split)
        batch = cfg.train.eval_batch_size
        members = [_score(f, split, batch, args.tta) for f in files]
        out = tmp / f"{domain.name}.fpm"
        save_ensemble(out, files)
        ens, ens_seconds = _score(out, split, batch, args.tta)
        ba = [100 * m["balanced_accuracy"] for m, _ in members]
        auc = [100 * m["auroc"] for m, _ in members]
        diffs.append(100 * ens["balanced_accuracy"] - float(np.mean(ba)))
        costs.append(ens_seconds / float(np.mean([s for _, s in members])))
        print(
            f"| {domain.name} | {', '.join(f'{b:.2f}' for b in ba)} | "
            f"{np.mean(ba):.2f} | {100 * ens['balanced_accuracy']:.2f} | "
            f"{diffs[-1]:+.2f} | {np.mean(auc):.2f} / {100 * ens['auroc']:.2f} |",
            flush=True,
        )
    if not diffs:
        raise SystemExit(f"no held-out domain under {args.run} has two finished seeds")
    d = np.array(diffs)
    lo, hi = bootstrap_ci(d)
    print(
        f"\nensemble - member mean, balanced accuracy: {d.mean():+.2f} points "
        f"[{lo:+.2f}, {hi:+.2f}] over {len(d)} held-out domains, sign-flip p = "
        f"{sign_flip_p(d):.3f}; prediction cost {np.mean(costs):.2f}x one member "
        f"({len(files)} members)"
    )


if __name__ == "__main__":
    main()
