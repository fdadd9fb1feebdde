"""One real-data fold on one GPU: AMi-Br, one held-out scanner, EfficientNet-Lite0
fine-tuned at the papers' input size (224 px), FedAvg / FedStain / pooled.

Sized to finish in under 10 minutes on one recent GPU (bf16 autocast, batch
64, 20 rounds x 1 local epoch for each method); it prints, per method, the
unseen scanner's balanced accuracy and AUROC of the last round and of the
round selected on the sources' validation slides, the wall time of the run
and the peak GPU memory.

    FEDPATH_AMIBR=/path/to/amibr python benchmarks/bench_gpu_fold.py
    python benchmarks/bench_gpu_fold.py --data /path/to/amibr --fold TUPAC16 \\
        --methods fedavg fedstain pooled --rounds 20 --image-size 224

``--device cpu`` runs the same script without a GPU, to check it
(``--device cpu --rounds 1 --image-size 64 --methods fedavg``: 46 s on the
project's 2 shared cores). Everything
else in fedpath runs on the CPU by default; nothing needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from _common import amibr_root

from fedpath.cli import main as fedpath_main

FOLDS = ("MIDOG21_HamamatsuXR", "MIDOG21_HamamatsuS360", "MIDOG21_AperioCS2", "TUPAC16")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=os.environ.get("FEDPATH_AMIBR"))
    ap.add_argument("--fold", choices=FOLDS, default="TUPAC16")
    ap.add_argument("--methods", nargs="+", default=["fedavg", "fedstain", "pooled"])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--out", type=Path, default=Path("runs/gpu_fold"))
    args = ap.parse_args()
    args.data = amibr_root(args.data)
    gpu = args.device.startswith("cuda")
    if gpu and not torch.cuda.is_available():
        raise SystemExit(
            f"--device {args.device}: no CUDA GPU here (torch "
            f"{torch.__version__}, CUDA build: {torch.version.cuda}); use a GPU "
            "machine, or --device cpu to check the script"
        )
    if gpu:
        print(f"GPU: {torch.cuda.get_device_name(0)}")
    common = [
        f"data.root={args.data}",
        f"output_dir={args.out}",
        f"data.params.image_size={args.image_size}",
        f"seeds=[{args.seed}]",
        f"lodo.targets=[{args.fold}]",
        f"train.rounds={args.rounds}",
        f"train.batch_size={args.batch_size}",
        f"train.eval_every={max(1, args.rounds // 4)}",
        "train.eval_batch_size=256",
        f"runtime.device={args.device}",
        f"runtime.precision={args.precision if gpu else 'fp32'}",
        "runtime.threads=null",
    ]
    rows = []
    for m in args.methods:
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        code = fedpath_main(
            ["suite", "configs/amibr/lite0_methods.yaml", *common, "--only", m, "-q"]
        )
        wall = time.perf_counter() - t0
        if code != 0:
            raise SystemExit(f"method {m} failed with exit code {code}")
        final = args.out / "amibr_lite0" / m / args.fold / f"seed{args.seed}"
        ev = json.loads((final / "final.json").read_text())["evaluation"]
        peak = torch.cuda.max_memory_allocated() / 2**30 if gpu else float("nan")
        rows.append(
            (m, ev["target"], ev.get("selected", {}).get("target", {}), wall, peak)
        )

    print(
        f"\nAMi-Br, unseen scanner {args.fold}, Lite0 at {args.image_size} px, "
        f"{args.rounds} rounds x 1 epoch, seed {args.seed}, {args.device} "
        f"({args.precision if gpu else 'fp32'})\n"
    )
    print(
        "| Method | bal. acc (last) | AUROC (last) | bal. acc (selected) | "
        "AUROC (selected) | wall s | peak GPU GiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for m, last, sel, wall, peak in rows:
        cells = [
            f"{100 * last['balanced_accuracy']:.1f}",
            f"{100 * last['auroc']:.1f}",
            f"{100 * sel.get('balanced_accuracy', float('nan')):.1f}",
            f"{100 * sel.get('auroc', float('nan')):.1f}",
            f"{wall:.0f}",
            f"{peak:.1f}",
        ]
        print(f"| {m} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
