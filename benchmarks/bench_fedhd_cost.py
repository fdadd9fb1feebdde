"""FedHD's local cost: GMM fit and one-to-one distillation of one slide, and bytes.

For one positive slide of :func:`synthetic_bags` (K = 10,000 patches, D = 1024),
prints:

* GMM fit (M = 16, full covariances): seconds for a fixed number of EM
  iterations, for ours (:func:`fedpath.mil.gmm.fit_gmm`, float32 torch) and for
  scikit-learn's ``GaussianMixture`` (float64 NumPy) from the same number of
  iterations, then ours run to convergence; peak RSS of each phase;
* distillation (T = 1000 tokens, 1000 Adam iterations): seconds, peak RSS, the
  alignment loss before/after, and how many synthetic tokens sit in the rare
  diagnostic cluster (GMM) versus a single Gaussian (``mode="single"``);
* bytes: one synthetic slide (T x D float32) against the weights of the MIL
  models at paper sizes (in_dim 1024), and against the GMM itself;
* with ``--quality``: ABMIL trained on distilled slides (M = 16, M = 1, mean
  only) versus on the real slides, evaluated on held-out real slides
  (D = 64 synthetic hospitals) -- what each summary keeps of the label.

Usage::

    python benchmarks/bench_fedhd_cost.py [--em-iters 10] [--skip-sklearn] [--quality]

Threads: ``FEDPATH_BENCH_THREADS`` (default 2, see ``_common.setup_threads``).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from _common import setup_threads

from fedpath.algorithms.mil_common import bag_loss
from fedpath.config import TrainConfig
from fedpath.evaluation.metrics import classification_metrics
from fedpath.mil import build_mil_model, synthetic_bags
from fedpath.mil.distill import DistillOptions, distill_features, distill_slides
from fedpath.mil.gmm import fit_gmm
from fedpath.mil.models import parameter_bytes
from fedpath.mil.predict import evaluate_mil
from fedpath.tasks.bags import fit_bags


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


CPU: list[float] = []  # process CPU seconds of the last phase (load-robust)


def phase(fn: Callable[[], Any]) -> tuple[Any, float, float, float]:
    """Run ``fn``; return (result, seconds, RSS before, peak RSS during) in MiB.

    The process CPU seconds go to ``CPU[-1]``: on a shared machine the wall
    time includes waiting for a core, the CPU time does not.
    """
    try:  # writing 5 resets the peak RSS (VmHWM) on Linux
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass
    before = _status_mib("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    CPU.append(time.process_time() - c0)
    return out, time.perf_counter() - t0, before, _status_mib("VmHWM")


def cost(args: argparse.Namespace) -> None:
    print(f"data: one positive synthetic slide, K={args.patches}, D={args.dim}")
    ds = synthetic_bags(
        1, 2, dim=args.dim, patches=(args.patches, args.patches), seed=0
    )
    bag = next(b for b in ds if b.label == 1)
    x = bag.features
    rare = ds.meta["rare_masks"][bag.slide_id]
    centre = ds.meta["rare_centre"][bag.domain]
    m = args.components

    g, sec, rss0, peak = phase(
        lambda: fit_gmm(x, m, "full", iters=args.em_iters, tol=0.0, seed=0)
    )
    print(
        f"GMM fit, ours ({args.em_iters} EM iterations, float32): {sec:.1f} s "
        f"(CPU {CPU[-1]:.1f} s) "
        f"({sec / max(g.n_iter, 1):.2f} s/iter incl. init), RSS {rss0:.0f} -> peak "
        f"{peak:.0f} MiB, mean log-lik {g.log_likelihood:.1f}"
    )
    ours_cpu = CPU[-1]
    if not args.skip_sklearn:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.mixture import GaussianMixture

        xn = x.double().numpy()
        sk = GaussianMixture(
            m, covariance_type="full", reg_covar=1e-4, max_iter=args.em_iters,
            tol=0.0, random_state=0,
        )  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            _, sk_sec, rss0, peak = phase(lambda: sk.fit(xn))
        print(
            f"GMM fit, scikit-learn GaussianMixture ({sk.n_iter_} iterations, "
            f"float64): {sk_sec:.1f} s (CPU {CPU[-1]:.1f} s; "
            f"{sk_sec / sk.n_iter_:.2f} s/iter), RSS "
            f"{rss0:.0f} -> peak {peak:.0f} MiB, mean log-lik {sk.score(xn):.1f}; "
            f"ours is {sk_sec / sec:.2f}x faster (wall), "
            f"{CPU[-1] / ours_cpu:.2f}x (CPU)"
        )
        del xn, sk
    g, sec, _, peak = phase(lambda: fit_gmm(x, m, "full", seed=0))
    print(
        f"GMM fit, ours to convergence (tol 1e-4 relative): {sec:.1f} s "
        f"(CPU {CPU[-1]:.1f} s), "
        f"{g.n_iter} iterations, converged={g.converged}, peak {peak:.0f} MiB"
    )
    radius = 1.25 * float((x[rare] - centre).norm(dim=1).max())

    def near(tokens: torch.Tensor) -> int:
        return int(((tokens - centre).norm(dim=1) < radius).sum())

    res, sec, rss0, peak = phase(
        lambda: distill_features(
            x, DistillOptions(tokens=args.tokens, iters=args.iters), gmm=g, seed=0
        )
    )
    print(
        f"distillation (T={args.tokens}, {args.iters} Adam iterations): {sec:.1f} s "
        f"(CPU {CPU[-1]:.1f} s) "
        f"({1000 * sec / max(args.iters, 1):.0f} ms/iter), RSS {rss0:.0f} -> peak "
        f"{peak:.0f} MiB, L_align {res.losses[0]:.4g} -> {res.losses[-1]:.4g}"
    )
    single = distill_features(
        x, DistillOptions(mode="single", tokens=args.tokens, iters=50)
    )
    print(
        f"rare cluster: {int(rare.sum())}/{len(x)} real patches "
        f"({100 * float(rare.float().mean()):.1f}%); synthetic tokens within "
        f"{radius:.1f} of its centre: M={m}: {near(res.tokens)}/{args.tokens}, "
        f"M=1: {near(single.tokens)}/{args.tokens}"
    )

    syn_bytes = args.tokens * args.dim * 4
    print(f"bytes: one synthetic slide (T x D float32) = {syn_bytes / 2**20:.2f} MiB")
    sizes = {
        "abmil": {},
        "clam_sb": {},
        "clam_mb": {},
        "transmil": {"hidden": 512, "heads": 8, "landmarks": 256},
        "acmil": {},
    }
    for name, params in sizes.items():
        model = build_mil_model(name, args.dim, 2, params)
        b = parameter_bytes(model)
        print(f"  {name} weights (in_dim {args.dim}): {b / 2**20:.2f} MiB")
    gmm_bytes = m * (args.dim * args.dim + args.dim + 1) * 4
    print(f"  the GMM itself (M={m}, full): {gmm_bytes / 2**20:.1f} MiB")


def quality(args: argparse.Namespace) -> None:
    ds = synthetic_bags(num_domains=3, slides_per_domain=24, dim=64, seed=0)
    train, test = ds.train_test_split(0.25, seed=0)
    print(
        f"\nquality: {len(train)} training / {len(test)} held-out real slides "
        "(3 hospitals, D=64); ABMIL trained 30 epochs, balanced accuracy on the "
        "held-out real slides"
    )

    def fit(bags: list[Any]) -> float:
        torch.manual_seed(0)
        model = build_mil_model("abmil", 64, 2, {"hidden": 128, "attn_dim": 64})
        train = TrainConfig(optimizer="adam", lr=5e-4, local_epochs=30, rounds=1)
        loss = bag_loss(torch.nn.functional.cross_entropy)
        fit_bags(model, bags, loss, train, seed=0)
        probs, labels = evaluate_mil(model, test.bags)
        return classification_metrics(labels, probs)["balanced_accuracy"]

    print(f"  real slides: {fit(train.bags):.3f}")
    for mode in ("gmm", "single", "mean"):
        t0 = time.perf_counter()
        syn = distill_slides(
            train.bags, DistillOptions(tokens=args.quality_tokens, iters=200, mode=mode)
        )
        sec = time.perf_counter() - t0
        print(
            f"  distilled, mode={mode}: {fit(syn):.3f} (distillation "
            f"{sec / len(syn):.2f} s/slide)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--patches", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--components", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--iters", type=int, default=1000, help="distillation steps")
    ap.add_argument("--em-iters", type=int, default=10, help="for the comparison")
    ap.add_argument("--skip-sklearn", action="store_true")
    ap.add_argument("--quality", action="store_true")
    ap.add_argument("--skip-cost", action="store_true", help="only --quality")
    ap.add_argument("--quality-tokens", type=int, default=200)
    args = ap.parse_args()
    threads = setup_threads()
    print(f"threads: {threads}")
    if not args.skip_cost:
        cost(args)
    if args.quality:
        quality(args)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
