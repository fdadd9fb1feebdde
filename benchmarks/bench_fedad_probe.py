"""FedAD's other probe protocol on finished runs: re-score each run's frozen
global encoder with Sec. 5.5's probe (issue 40).

``bench_fedad_claim.py`` trains each method once and probes its encoder with
Sec. 5.3.2's protocol (the logistic regression fitted on two hospitals that took
no part in training, tested on a third). The paper's Sec. 5.5 fits the probe on
the unseen hospital's own labelled training split instead. The encoder is the
same, so this script does not train: it loads each finished run's ``model.fpm``
(the exported global model), fits and tests the probe with
``evaluation.probe_train=[]`` (everything else as the run had it, the probe's
seed included) and writes a mirror run (``config.yaml``, ``final.json``) under
``--out``, so ``fedpath table`` and ``fedpath compare`` read it like any other.
Resumable: mirrors already written are kept.

    python benchmarks/bench_fedad_probe.py runs/claims/fedad_claim
    python benchmarks/bench_fedad_probe.py runs/claims/fedad_claim --check  # the
        # run's own protocol again: must reproduce each final.json's probe
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from _common import setup_threads

from fedpath.algorithms.base import derive_seed
from fedpath.artifact import LoadedModel
from fedpath.cli import main as fedpath
from fedpath.config import ExperimentConfig, load_config
from fedpath.data.base import DomainDataset
from fedpath.data.partition import LodoFold
from fedpath.loading import load_model
from fedpath.runtime.evaluate import eval_splits, evaluate_probe
from fedpath.runtime.experiment import find_runs, load_dataset
from fedpath.runtime.records import read_final
from fedpath.tasks import make_task
from fedpath.tasks.features import prepare_dataset

#: the metrics compared with the run's own record under --check
CHECKED = ("f1", "balanced_accuracy", "auroc")


def reprobe(
    run: Path,
    cfg: ExperimentConfig,
    rec: dict[str, Any],
    cache: dict[str, DomainDataset],
) -> dict:
    """The probe metrics of ``run``'s exported encoder under ``cfg`` (its config,
    perhaps with another probe protocol), seeded as the run (``rec``) seeded it."""
    key = repr(cfg.data)
    if key not in cache:
        cache[key] = prepare_dataset(cfg, load_dataset(cfg.data))
    dataset = cache[key]
    model = load_model(run / "model.fpm")
    if not isinstance(model, LoadedModel):
        raise SystemExit(f"{run / 'model.fpm'}: not an image model's file")
    splits = eval_splits(cfg, dataset, LodoFold(rec["target"], []))
    task = make_task(cfg, dataset)
    seed = derive_seed(int(rec["seed"]), "probe")
    return evaluate_probe(task, model.model, splits, cfg, seed, lambda *a: None)


def mirror(
    dest: Path, run: Path, cfg: ExperimentConfig, rec: dict[str, Any], metrics: dict
) -> None:
    """Write ``run``'s re-probed record (``rec`` with ``metrics``) to ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.yaml").write_text(cfg.to_yaml())
    out = {**rec, "evaluation": {"target": metrics}, "reprobed_from": str(run)}
    (dest / "final.json").write_text(json.dumps(out, indent=1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "root", type=Path, help="finished runs (e.g. runs/claims/fedad_claim)"
    )
    ap.add_argument("--out", type=Path, help="mirror tree (default: ROOT_s55)")
    ap.add_argument("--methods", nargs="+", help="only these method folders")
    ap.add_argument("--baseline", default="fedavg_ssl")
    ap.add_argument(
        "--check",
        action="store_true",
        help="re-score with each run's own protocol and compare with its final.json",
    )
    args = ap.parse_args(argv)
    setup_threads()
    roots = [args.root / m for m in args.methods] if args.methods else [args.root]
    runs = find_runs(roots)
    cache: dict[str, DomainDataset] = {}
    if args.check:
        worst = 0.0
        for run in runs:
            rec = read_final(run)
            got = reprobe(run, load_config(run / "config.yaml"), rec, cache)
            want = rec["evaluation"]["target"]
            gap = max(abs(got[k] - want[k]) for k in CHECKED)
            worst = max(worst, gap)
            print(f"{run}: largest difference {gap:.2e}", flush=True)
        print(f"largest difference over {len(runs)} runs: {worst:.2e}")
        return 0 if worst < 1e-9 else 1
    out = args.out or args.root.with_name(args.root.name + "_s55")
    s55 = ["evaluation.probe_train=[]"]
    for i, run in enumerate(runs, 1):
        dest = out / run.relative_to(args.root)
        if (dest / "final.json").is_file():
            continue
        cfg, rec = load_config(run / "config.yaml", s55), read_final(run)
        metrics = reprobe(run, cfg, rec, cache)
        mirror(dest, run, cfg, rec, metrics)
        print(f"[{i}/{len(runs)}] {run}: f1 {metrics['f1']:.4f}", file=sys.stderr)
    code = 0
    for metric in ("f1", "balanced_accuracy"):
        print(f"\n{metric} (%) of Sec. 5.5's probe (fitted inside the unseen hospital)")
        code = code or fedpath(["table", str(out), "--metric", metric])
        code = code or fedpath(
            ["compare", str(out), "--baseline", args.baseline, "--metric", metric]
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
