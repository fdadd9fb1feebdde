"""FedStain's cost: local epoch time vs FedAvg, statistics share of a round, bytes.

For one client of the synthetic hospitals, time one local epoch of FedAvg, FedCCRL
and FedStain (client half ``handle("fit")``, same data and batch size), the
statistics stage (compute ceil(r * n) images' moments), and the bytes a client
uploads per round: model weights versus statistics.

    python benchmarks/bench_fedstain_cost.py                       # small CNN, 48 px
    python benchmarks/bench_fedstain_cost.py --backbone resnet18 --image-size 128
"""

from __future__ import annotations

import argparse
import time

import torch
from _common import setup_threads

from fedpath.algorithms.base import ALGORITHMS, ClientContext
from fedpath.config import load_config, resolve_params
from fedpath.models.backbones import build_model
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks.images import ImageTask
from fedpath.types import ClientState, Payload, as_numpy_dict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backbone", default="small_cnn")
    ap.add_argument("--image-size", type=int, default=48)
    ap.add_argument("--images", type=int, default=320, help="training images")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    threads = setup_threads()
    cfg = load_config(
        None,
        [
            f"model.backbone={args.backbone}",
            f"data.params.image_size={args.image_size}",
            "data.params.samples_per_hospital=600",
            "train.local_epochs=1",
            "train.batch_size=32",
        ],
    )
    ds = load_dataset(cfg.data)
    split = ds.split(ds.domains[0], "train").subset(range(args.images))
    pool_src = ds.split(ds.domains[1], "train")
    torch.manual_seed(0)
    weights = as_numpy_dict(build_model(cfg.model, 2).state_dict())

    task = ImageTask(cfg, ds)

    def ctx(data):  # type: ignore[no-untyped-def]
        return ClientContext(
            client_id="c", domain=ds.domains[0], data=data, task=task, round=1, seed=0
        )

    times: dict[str, float] = {}
    stats_s = 0.0
    stats_bytes = 0
    for algo in ("fedavg", "fedccrl", "fedstain"):
        spec = ALGORITHMS.get(algo)
        params = resolve_params(ALGORITHMS.params(algo), {}, "algorithm.params")
        pool = {}
        if algo != "fedavg":
            other = spec.client(params, ctx(pool_src))
            pool = other.handle("stats", Payload(), ClientState()).arrays["stats"]
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            spec.client(params, ctx(split)).handle(
                "fit", Payload({"weights": weights, "pool": pool}), ClientState()
            )
            best = min(best, time.perf_counter() - t0)
        times[algo] = best
        if algo == "fedstain":
            t0 = time.perf_counter()
            up = spec.client(params, ctx(split)).handle(
                "stats", Payload(), ClientState()
            )
            stats_s = time.perf_counter() - t0
            stats_bytes = up.nbytes()
    w_bytes = sum(v.nbytes for v in weights.values())
    print(
        f"{args.backbone}, {args.image_size} px, {args.images} images, batch 32, "
        f"{threads} threads; best of {args.repeats} local epochs"
    )
    for algo, t in times.items():
        print(f"  {algo:9s} {t:7.2f} s/epoch  ({t / times['fedavg']:.2f}x FedAvg)")
    round_s = times["fedstain"]
    print(
        f"  FedStain statistics stage: {1000 * stats_s:.1f} ms = "
        f"{100 * stats_s / (stats_s + round_s):.2f}% of a 1-epoch round"
    )
    print(
        f"  bytes up per client per round: weights {w_bytes / 2**20:.2f} MiB, "
        f"statistics {stats_bytes} B ({100 * stats_bytes / w_bytes:.3f}% of weights)"
    )


if __name__ == "__main__":
    main()
