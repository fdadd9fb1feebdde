"""What FedStain's uploaded statistics leak, with and without the defences.

A FedStain client uploads, per image of a ceil(r * n) sample, 12 numbers (mean,
std, skewness, excess kurtosis of L, a, b). Two attacks on the pool a client (or
the coordinator) receives, on real crops (AMi-Br, four scanners) when
``FEDPATH_AMIBR`` / ``--data`` is set, else on the synthetic hospitals:

- **membership / re-identification**: an attacker holding a candidate image
  recomputes its statistics and looks for it in the pool. Score: distance to the
  nearest pool entry (standardized features); reported as the AUROC of members
  vs non-members, the share of members whose nearest entry is their own
  (re-identified), and the share matched exactly (distance < 1e-4).
- **hospital attribution**: leave-one-out 1-nearest-neighbour scanner
  identification on the pool entries (chance = 1 / number of domains). The pool
  order says the hospital by position unless ``shuffle_pool`` is on; by content
  the statistics reveal the scanner anyway (that is what they are for).

Defences (FedStain / FedCCRL params): ``stats_noise`` (Gaussian noise as a
fraction of each statistic's spread over the client's upload), ``stats_decimals``
(rounding), ``shuffle_pool``. ``--accuracy`` also trains FedStain on the
synthetic hospitals with each noise level (the accuracy cost).

    python benchmarks/bench_leakage.py [--data /path/to/amibr] [--per-domain 60]
    python benchmarks/bench_leakage.py --accuracy [--folds hospital_0 hospital_3]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from fedpath.algorithms.stats_exchange import defend_statistics
from fedpath.config import load_config
from fedpath.runtime.experiment import load_dataset
from fedpath.stain import image_statistics, to_space

DEFENCES = [
    ("none", 0.0, None),
    ("round 2 decimals", 0.0, 2),
    ("round 1 decimal", 0.0, 1),
    ("noise 0.1", 0.1, None),
    ("noise 0.5", 0.5, None),
    ("noise 1.0", 1.0, None),
]


def sample(
    data: str | None, per_domain: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(n, 12) LAB moments of ``per_domain`` images per domain, and the domains."""
    if data:
        over = [
            "data.name=manifest",
            f"data.root={data}",
            "data.params={path: manifest.csv, image_size: 128, "
            "classes: [normal, atypical], in_memory: false}",
        ]
    else:
        over = ["data.params.image_size=64", "data.params.samples_per_hospital=200"]
    ds = load_dataset(load_config(None, over).data)
    rng = np.random.default_rng(seed)
    feats, doms = [], []
    for k, d in enumerate(ds.domains):
        split = ds.split(d, "all")
        idx = np.sort(
            rng.choice(len(split), size=min(per_domain, len(split)), replace=False)
        )
        imgs = split.load(idx).float().div_(255.0)
        m = image_statistics(to_space(imgs, "lab"), "moments").float().numpy()
        feats.append(m)
        doms += [k] * len(m)
    return np.concatenate(feats), np.asarray(doms)


def _standardize(a: np.ndarray, ref: np.ndarray) -> np.ndarray:
    flat = ref.reshape(len(ref), -1)
    return (a.reshape(len(a), -1) - flat.mean(0)) / (flat.std(0) + 1e-12)


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))


def attacks(
    stats: np.ndarray,
    domains: np.ndarray,
    noise: float,
    decimals: int | None,
    seed: int,
) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    member = np.zeros(len(stats), bool)
    for d in np.unique(domains):  # each hospital uploads half of its sample
        idx = np.flatnonzero(domains == d)
        member[rng.choice(idx, size=len(idx) // 2, replace=False)] = True
    own, pool_parts = [], []
    for d in np.unique(domains):  # each hospital defends its own upload
        idx = np.flatnonzero(member & (domains == d))
        own.append(idx)
        pool_parts.append(
            defend_statistics({"m": stats[idx]}, noise, decimals, rng)["m"]
        )
    own_idx, pool = np.concatenate(own), np.concatenate(pool_parts)
    pool_dom = domains[own_idx]
    dist = _distances(_standardize(stats, stats), _standardize(pool, stats))
    nearest = dist.min(1)
    cand = np.flatnonzero(member)
    pp = _distances(_standardize(pool, stats), _standardize(pool, stats))
    np.fill_diagonal(pp, np.inf)
    return {
        "membership_auroc": float(roc_auc_score(member, -nearest)),
        "reidentified": float(np.mean([own_idx[dist[i].argmin()] == i for i in cand])),
        "exact": float(np.mean(nearest[cand] < 1e-4)),
        "attribution_1nn": float(np.mean(pool_dom[pp.argmin(1)] == pool_dom)),
        "chance": 1.0 / len(np.unique(domains)),
    }


def _cell(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f}"


def accuracy(folds: list[str], seeds: list[int], out: Path) -> None:
    from fedpath.cli import main as fedpath_main
    from fedpath.runtime.experiment import collect_rows

    base = (
        Path(__file__).resolve().parents[1] / "fedpath" / "configs" / "demo_base.yaml"
    )
    for label, noise, shuffle in [
        ("none", 0.0, False),
        ("noise 0.5", 0.5, False),
        ("noise 1.0", 1.0, False),
        ("noise 0.5 + shuffle", 0.5, True),
    ]:
        name = "leak_" + label.replace(" ", "_").replace(".", "").replace("+", "")
        over = [
            "algorithm.name=fedstain",
            f"algorithm.params.stats_noise={noise}",
            f"algorithm.params.shuffle_pool={shuffle}",
            f"lodo.targets=[{','.join(folds)}]",
            f"seeds=[{','.join(map(str, seeds))}]",
            f"name={name}",
            f"output_dir={out}",
            "runtime.threads=1",
        ]
        t0 = time.perf_counter()
        assert fedpath_main(["run", str(base), *over, "--quiet"]) == 0
        rows = collect_rows([out / name])
        acc = [100 * float(r.metrics["accuracy"]) for r in rows]
        runs = ", ".join(f"{a:.2f}" for a in acc)
        wall = time.perf_counter() - t0
        print(
            f"  {label:<22} accuracy at the unseen hospital {np.mean(acc):.2f} "
            f"(per run {runs}; {wall:.0f} s)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=os.environ.get("FEDPATH_AMIBR"))
    ap.add_argument("--per-domain", type=int, default=60)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--accuracy", action="store_true")
    ap.add_argument("--folds", nargs="+", default=["hospital_0", "hospital_3"])
    ap.add_argument("--out", type=Path, default=Path("runs/bench_leakage"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.accuracy:
        print(f"FedStain on the synthetic hospitals (demo budget), folds {args.folds}")
        accuracy(args.folds, [0], args.out)
        return
    stats, domains = sample(args.data, args.per_domain, 0)
    where = "AMi-Br crops" if args.data else "synthetic hospitals"
    print(
        f"{len(stats)} images of {len(np.unique(domains))} domains ({where}); "
        f"half of each domain uploaded; mean ± std over seeds {args.seeds}\n"
    )
    print("| defence | membership AUROC | re-identified | exact match | scanner 1-NN |")
    print("|---|---:|---:|---:|---:|")
    for label, noise, decimals in DEFENCES:
        res = [attacks(stats, domains, noise, decimals, s) for s in args.seeds]

        def cell(key: str, res: list[dict[str, float]] = res) -> str:
            return _cell([r[key] for r in res])

        print(
            f"| {label} | {cell('membership_auroc')} | {cell('reidentified')} | "
            f"{cell('exact')} | {cell('attribution_1nn')} |"
        )
    print(f"\nchance for the scanner: {res[0]['chance']:.2f}")


if __name__ == "__main__":
    main()
