"""The frozen-feature fast path against the pixel path, same model, same budget.

FedAvg trains the classifier of a frozen pretrained encoder two ways: on pixels
(``train.trainable: classifier``: every round encodes every image again) and on
cached embeddings (``train.cache_features: true``). Prints the one-off encoding
time, the time to reuse the cache, the seconds per round of each path (client
training only, the median over rounds 2 to R of the runs' timing records) and
their ratio, and the unseen-domain balanced accuracy of both (equal up to float
rounding: the same training).

    FEDPATH_AMIBR=/path/to/amibr python benchmarks/bench_feature_cache.py
    python benchmarks/bench_feature_cache.py --data /path/to/amibr --rounds 3

Default config: ``configs/amibr/lite0_frozen.yaml`` (Lite0 at 128 px) with one
held-out scanner. Threads: ``runtime.threads`` of the config (1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

from _common import amibr_root

from fedpath.config import load_config
from fedpath.runtime.experiment import load_dataset, run_experiment
from fedpath.tasks import features as feature_path


def _round_seconds(run_root: Path) -> float:
    """Median client training time of a round, round 1 left out (it also pays
    one-off set-up: kernels, allocator, first model build)."""
    times = []
    for f in run_root.rglob("results.jsonl"):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("kind") == "timing" and int(rec["round"]) > 1:
                times.append(float(rec["client_s"]))
    if not times:
        raise SystemExit("--rounds must be at least 2 (round 1 is not timed)")
    return float(statistics.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=os.environ.get("FEDPATH_AMIBR"))
    ap.add_argument("--config", default="configs/amibr/lite0_frozen.yaml")
    ap.add_argument("--target", default="TUPAC16")
    ap.add_argument("--rounds", type=int, default=4, help="rounds of each path (>= 2)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_feature_cache"))
    args = ap.parse_args()
    args.data = amibr_root(args.data)
    shutil.rmtree(args.out, ignore_errors=True)
    over = [
        f"data.root={args.data}",
        f"output_dir={args.out}",
        f"lodo.targets=[{args.target}]",
        "seeds=[0]",
        f"train.rounds={args.rounds}",
        f"train.eval_every={args.rounds}",
        "runtime.checkpoint=false",
        "runtime.export_model=false",
    ]
    cached = load_config(args.config, [*over, "name=cached"])
    pixels = load_config(
        args.config, [*over, "name=pixels", "train.cache_features=false"]
    )
    dataset = load_dataset(cached.data)

    t0 = time.perf_counter()
    feature_path.prepare_dataset(cached, dataset)
    encode_s = time.perf_counter() - t0
    feature_path._ENCODED.clear()
    feature_path._PREPARED.clear()
    t0 = time.perf_counter()
    feature_path.prepare_dataset(cached, dataset)
    reuse_s = time.perf_counter() - t0

    results = {}
    for cfg in (cached, pixels):
        rec = run_experiment(cfg, dataset=dataset)[0]
        secs = _round_seconds(args.out / cfg.name)
        results[cfg.name] = (secs, rec["evaluation"]["target"])

    n = len(dataset.store)
    print(f"\n{n} images, {cached.model.backbone} at {dataset.image_size} px, FedAvg")
    print(f"encode once: {encode_s:.1f} s; reuse the cache: {reuse_s:.1f} s")
    for name, (secs, target) in results.items():
        print(
            f"{name:>7}: {secs:7.3f} s per round ({60 / secs:7.1f} rounds/min, "
            f"client training, median of rounds 2-{args.rounds}), balanced acc "
            f"{100 * target['balanced_accuracy']:.2f} at {args.target}"
        )
    print(f"speed-up: {results['pixels'][0] / results['cached'][0]:.0f}x")


if __name__ == "__main__":
    main()
