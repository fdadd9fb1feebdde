"""FedAD's cost against FedAvg-SSL: time per local epoch, peak memory, bytes per round.

FedAD Section 7.6 reports 1.45x the wall-clock time per local epoch of FedAvg-SSL
(the frozen teacher's extra forward pass) and +12 % client memory, with the same
communication as FedAvg. For one client of the synthetic hospitals this times
``handle("fit")`` of each method (one local epoch, same data, batch and seed,
interleaved, best of ``--repeats``), measures the peak memory of one epoch in a
fresh subprocess per method (RSS sampled every 2 ms during the epoch, above the
RSS before it, on CPU;
``torch.cuda.max_memory_allocated`` on a GPU), and the bytes each uploads.

    python benchmarks/bench_fedad_cost.py                      # small CNN, 48 px
    python benchmarks/bench_fedad_cost.py --backbone resnet18 --image-size 96

Threads: ``FEDPATH_BENCH_THREADS`` (default 2; use 1 on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

import torch
from _common import rss_mib, setup_threads

from fedpath.algorithms.base import ALGORITHMS, ClientContext
from fedpath.config import load_config, resolve_params
from fedpath.models.backbones import build_model
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks.images import ImageTask
from fedpath.types import ClientState, Payload, as_numpy_dict

METHODS = ("fedavg_ssl", "fedad", "moon")


def setup(args: argparse.Namespace) -> tuple[ImageTask, Any, dict[str, Any]]:
    cfg = load_config(
        None,
        [
            f"model.backbone={args.backbone}",
            f"data.params.image_size={args.image_size}",
            "data.params.samples_per_hospital=600",
            "data.params.num_hospitals=2",
            "train.local_epochs=1",
            f"train.batch_size={args.batch}",
            "train.lr=0.0005",
            "train.weight_decay=0.00001",
            f"runtime.device={args.device}",
        ],
    )
    ds = load_dataset(cfg.data)
    split = ds.split(ds.domains[0], "train").subset(range(args.images))
    torch.manual_seed(0)
    model = build_model(cfg.model, 2)
    weights = as_numpy_dict(model.state_dict())
    return ImageTask(cfg, ds), split, weights


def payload_for(algo: str, weights: dict[str, Any], task: ImageTask) -> Payload:
    """The round-1 broadcast of ``algo`` (from its own server half)."""
    from fedpath.algorithms.base import ServerContext

    spec = ALGORITHMS.get(algo)
    params = resolve_params(ALGORITHMS.params(algo), {}, "algorithm.params")
    server = spec.server(
        params,
        ServerContext(
            initial_weights=weights,
            client_ids=["c"],
            client_domains={"c": "d"},
            seed=0,
            task=task,
        ),
    )
    return server.configure("fit", 1, ["c"])["c"]


def epoch(
    algo: str, task: ImageTask, split: Any, msg: Payload, state: ClientState
) -> Payload:
    spec = ALGORITHMS.get(algo)
    params = resolve_params(ALGORITHMS.params(algo), {}, "algorithm.params")
    ctx = ClientContext(
        client_id="c", domain="d", data=split, task=task, round=1, seed=0
    )
    return spec.client(params, ctx).handle("fit", msg, state)


def memory_worker(args: argparse.Namespace) -> None:
    """One epoch of ``args.worker`` in this fresh process; print its peak memory."""
    task, split, weights = setup(args)
    msg = payload_for(args.worker, weights, task)
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    import gc
    import threading

    gc.collect()
    before = rss_mib()
    peak = [before]
    done = threading.Event()

    def sample() -> None:  # maxrss would include the dataset's generation peak
        while not done.is_set():
            peak[0] = max(peak[0], rss_mib())
            time.sleep(0.002)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    epoch(args.worker, task, split, msg, ClientState())
    done.set()
    watcher.join()
    out = {
        "rss_before": before,
        "peak_rss": max(peak[0], rss_mib()),
        "cuda_peak_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
    }
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backbone", default="small_cnn")
    ap.add_argument("--image-size", type=int, default=48)
    ap.add_argument("--images", type=int, default=256, help="training images")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    threads = setup_threads()
    if args.worker:
        memory_worker(args)
        return
    task, split, weights = setup(args)
    msgs = {a: payload_for(a, weights, task) for a in METHODS}
    best = {a: float("inf") for a in METHODS}
    up: dict[str, int] = {}
    for a in METHODS:  # warm-up (allocator, first-call overheads)
        up[a] = epoch(a, task, split, msgs[a], ClientState()).nbytes()
    for _ in range(args.repeats):
        for a in METHODS:
            t0 = time.perf_counter()
            epoch(a, task, split, msgs[a], ClientState())
            best[a] = min(best[a], time.perf_counter() - t0)
    mem: dict[str, dict[str, Any]] = {}
    for a in METHODS:
        cmd = [sys.executable, __file__, "--worker", a, *sys.argv[1:]]
        res = subprocess.run(cmd, capture_output=True, text=True, check=True)
        mem[a] = json.loads(res.stdout.strip().splitlines()[-1])
    model = task.build_model()
    enc = sum(
        v.numel() * v.element_size()
        for k, v in model.state_dict().items()
        if k.startswith("encoder.")
    )
    full = sum(v.numel() * v.element_size() for v in model.state_dict().values())
    print(
        f"{args.backbone}, {args.image_size} px, {args.images} images, batch "
        f"{args.batch}, {threads} threads, {args.device}; best of {args.repeats} "
        "interleaved local epochs"
    )
    base = best["fedavg_ssl"]
    for a in METHODS:
        m = mem[a]
        grow = m["peak_rss"] - m["rss_before"]
        line = (
            f"  {a:10s} {best[a]:6.2f} s/epoch ({best[a] / base:.2f}x FedAvg-SSL)  "
            f"peak RSS {m['peak_rss']:.0f} MiB (+{grow:.0f} MiB during the epoch)"
        )
        if m["cuda_peak_mib"] is not None:
            line += f"  CUDA peak {m['cuda_peak_mib']:.0f} MiB"
        print(line)
    print("  bytes up per client per round:")
    for a in METHODS:
        print(f"    {a:10s} {up[a]:>10d} B")
    print(f"    encoder only (FedAvg of the extractor) {enc:>10d} B")
    print(f"    FedAvg of the whole model (classifier too) {full:>10d} B")
    assert up["fedad"] == enc, "FedAD must upload exactly the encoder"


if __name__ == "__main__":
    main()
