"""Test-time choices measured after the fact on finished runs: test-time
augmentation and BatchNorm adaptation to the unseen scanner.

For every run under the given directories (``model.fpm`` + ``config.yaml``):
the unseen domain's balanced accuracy, AUROC and ECE with the model as trained
(``plain``), with ``tta: dihedral`` (the mean softmax over the 8 flips and
90-degree turns), with its BatchNorm statistics re-estimated on the unseen
domain's unlabelled images (``adabn``, :mod:`fedpath.tasks.adapt`: the images
and the layers ``evaluation.adapt_bn`` would use, so the frozen stages of a
partly fine-tuned model keep theirs unless ``--all-layers``; no label is
read) and with both (``adabn+tta``), on the run's own evaluation split, read
from the run's data (AMi-Br: ``FEDPATH_AMIBR``). Argmax decisions (no
operating point) for all.

BatchNorm statistics are estimated in batches of the run's
``train.eval_batch_size`` (256 by default), as ``evaluation.adapt_bn`` and
``fedpath adapt-bn`` do: the estimate is the mean of per-batch statistics, so
another batch size gives slightly different statistics (before this was aligned
the script used 64).

``--eval-split test`` scores every mode on the unseen domain's test split only
and adapts on its train split (disjoint from the scored images), whatever the
run used; ``all`` scores and adapts on every image of the domain (transductive,
what the ``configs/amibr/`` runs record). The model does not depend on this
choice: the unseen domain takes no part in training.

    FEDPATH_AMIBR=/path/to/amibr python benchmarks/bench_test_time.py \\
        runs/amibr_lite0 --methods fedavg fedstain --modes plain adabn
"""

from __future__ import annotations

import argparse
import copy
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import yaml

from fedpath.config import build_config
from fedpath.evaluation.metrics import classification_metrics
from fedpath.loading import load_model
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks.adapt import adapt_on_split, adaptation_split
from fedpath.tasks.finetune import fixed_batchnorm
from fedpath.tasks.images import predict_probs

MODES = ("plain", "tta", "adabn", "adabn+tta")
SHOWN = ("balanced_accuracy", "auroc", "ece")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--methods", nargs="*", help="only these methods")
    ap.add_argument("--folds", nargs="*", help="only these held-out domains")
    ap.add_argument("--seeds", nargs="*", type=int, help="only these seeds")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument(
        "--eval-split",
        choices=("run", "all", "test"),
        default="run",
        help="which images of the unseen domain are scored (and which adapt): "
        "the run's lodo.eval_split, all (adapt on the scored images) or test "
        "(score the test split, adapt on the train split: disjoint)",
    )
    ap.add_argument(
        "--all-layers",
        action="store_true",
        help="adabn: adapt the BatchNorm layers of the stages frozen in training "
        "too (by default they keep their statistics, as evaluation.adapt_bn and "
        "fedpath adapt-bn do)",
    )
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cpu = torch.device("cpu")
    # method -> [(target, seed, {mode: metrics})]
    rows: dict[str, list[tuple[str, int, dict]]] = defaultdict(list)
    datasets: dict[str, object] = {}
    for root in args.paths:
        for fpm in sorted(root.rglob("model.fpm")):
            run = fpm.parent
            raw = yaml.safe_load((run / "config.yaml").read_text())
            cfg = build_config(raw)
            target, seed = run.parent.name, int(run.name[4:])
            if args.methods and cfg.method not in args.methods:
                continue
            if (args.folds and target not in args.folds) or (
                args.seeds is not None and seed not in args.seeds
            ):
                continue
            key = repr(cfg.data)
            if key not in datasets:
                datasets[key] = load_dataset(cfg.data)
            ds = datasets[key]
            eval_split = (
                cfg.lodo.eval_split if args.eval_split == "run" else args.eval_split
            )
            split = ds.split(target, eval_split)  # type: ignore[attr-defined]
            model = load_model(fpm).model
            # the batch the run's own evaluation.adapt_bn uses: AdaBN's estimate
            # (the mean of per-batch statistics) depends on it
            batch = cfg.train.eval_batch_size
            t0 = time.perf_counter()
            adapted = model
            if any(m.startswith("adabn") for m in args.modes):
                adapted = copy.deepcopy(model)
                images, _ = adaptation_split(ds, target, eval_split)  # type: ignore[arg-type]
                # the frozen stages' statistics stay (from the run's config: files
                # written before bn_fixed was recorded lack it)
                keep = [] if args.all_layers else fixed_batchnorm(model, cfg.train)
                adapt_on_split(adapted, images, batch, cpu, keep)
            out = {}
            for mode in args.modes:
                net = adapted if mode.startswith("adabn") else model
                tta = "dihedral" if mode.endswith("tta") else "none"
                p = predict_probs(net, split, batch, cpu, tta).double().numpy()
                out[mode] = classification_metrics(split.labels, p, p.argmax(1))
            rows[cfg.method].append((target, seed, out))
            shown = ", ".join(
                f"{mode} {100 * m['balanced_accuracy']:.2f} / {100 * m['auroc']:.2f}"
                for mode, m in out.items()
            )
            print(
                f"{cfg.method:10s} {target:24s} seed {seed}: BA / AUROC {shown} "
                f"({eval_split}: {len(split.labels)} scored; "
                f"{time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    if not rows:
        wanted = {
            "--methods": args.methods,
            "--folds": args.folds,
            "--seeds": args.seeds,
        }
        chosen = ", ".join(
            f"{k} {' '.join(map(str, v))}" for k, v in wanted.items() if v
        )
        raise SystemExit(
            f"no finished run (model.fpm + config.yaml) under "
            f"{', '.join(map(str, args.paths))}"
            + (f" matches {chosen}" if chosen else "")
        )
    print("\nmean over runs (%; ECE as a fraction):")
    heads = " | ".join(f"{m} BA / AUROC / ECE" for m in args.modes)
    print(f"| method | runs | {heads} |")
    print("|---|---:|" + "---:|" * len(args.modes))
    for method, rs in rows.items():
        cells = []
        for mode in args.modes:
            ba, au, ece = (np.mean([r[2][mode][k] for r in rs]) for k in SHOWN)
            cells.append(f"{100 * ba:.2f} / {100 * au:.2f} / {ece:.3f}")
        print(f"| {method} | {len(rs)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
