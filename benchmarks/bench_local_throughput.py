"""Local training throughput: fedpath's client half vs a plain PyTorch loop.

Same model (small CNN), same data (one synthetic hospital's training split), same
batch size and optimizer. The fedpath side is the real FedAvg client half
(`handle("fit")`: build model, load global weights, the image task's loop, upload
weights), so its overhead includes everything a round costs a client. Target: ratio
>= 0.95.

    python benchmarks/bench_local_throughput.py [--image-size 64] [--epochs 3]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from _common import setup_threads

from fedpath.algorithms.base import ALGORITHMS, ClientContext
from fedpath.config import load_config, resolve_params
from fedpath.models.backbones import build_model
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks.images import ImageTask
from fedpath.types import ClientState, Payload, as_numpy_dict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    threads = setup_threads()
    cfg = load_config(
        None,
        [
            f"data.params.image_size={args.image_size}",
            "data.params.samples_per_hospital=800",
            f"train.local_epochs={args.epochs}",
            f"train.batch_size={args.batch_size}",
            "train.lr=1e-3",
        ],
    )
    ds = load_dataset(cfg.data)
    split = ds.split(ds.domains[0], "train")
    n_images = len(split) * args.epochs

    def plain() -> float:
        torch.manual_seed(0)
        model = build_model(cfg.model, ds.num_classes).train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        images = split.store.load(split.indices)
        labels = torch.from_numpy(split.labels)
        t0 = time.perf_counter()
        for _ in range(args.epochs):
            perm = torch.randperm(len(split))
            for s in range(0, len(split), args.batch_size):
                idx = perm[s : s + args.batch_size]
                x = images[idx].float().div_(255.0)
                loss = F.cross_entropy(model(x), labels[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        return n_images / (time.perf_counter() - t0)

    spec = ALGORITHMS.get("fedavg")
    params = resolve_params(ALGORITHMS.params("fedavg"), cfg.algorithm.params, "a")
    torch.manual_seed(0)
    weights = as_numpy_dict(build_model(cfg.model, ds.num_classes).state_dict())

    def runtime() -> float:
        ctx = ClientContext(
            client_id="bench",
            domain=ds.domains[0],
            data=split,
            task=ImageTask(cfg, ds),
            round=1,
            seed=0,
        )
        t0 = time.perf_counter()
        spec.client(params, ctx).handle(
            "fit", Payload({"weights": weights}), ClientState()
        )
        return n_images / (time.perf_counter() - t0)

    plain(), runtime()  # warm-up (allocator, kernels)
    # Interleave the two so that machine noise hits both alike; report the best
    # of each and the spread of the per-pair ratios.
    pairs = [(plain(), runtime()) for _ in range(args.repeats)]
    p = max(a for a, _ in pairs)
    r = max(b for _, b in pairs)
    ratios = sorted(b / a for a, b in pairs)
    print(
        f"local training throughput, small CNN, {args.image_size}px, batch "
        f"{args.batch_size}, {len(split)} images x {args.epochs} epochs, "
        f"{threads} threads"
    )
    print(f"  plain PyTorch loop : {p:8.1f} images/s")
    print(f"  fedpath client half: {r:8.1f} images/s")
    print(
        f"  ratio runtime/plain: {r / p:.3f}  (target >= 0.95); per-pair ratios "
        f"median {ratios[len(ratios) // 2]:.3f}, range {ratios[0]:.3f}-"
        f"{ratios[-1]:.3f} over {args.repeats} interleaved pairs"
    )


if __name__ == "__main__":
    main()
