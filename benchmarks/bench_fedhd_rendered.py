"""FedHD's central claim on a benchmark where it could show (issue 40).

Hospitals with different feature extractors and MIL models
(``configs/fedhd/rendered.yaml``) on slides of rendered H&E patches whose label
lives in 2-6 tumour patches of 48 (:mod:`fedpath.data.rendered_slides`; written
once under ``--bags``, about 4 minutes on one core). Runs each method over the
config's seeds, prints the clients x methods tables, then every method paired
with local-only training over the (hospital, seed) units (``fedpath compare``'s
statistics): mean difference, bootstrap 95% interval, paired test, verdict.

Methods: those of ``bench_fedhd_hetero.py`` (``local``, ``fedhd``,
``mean_matching``, ``pooled``, any registered MIL algorithm) and

* ``pooled_own``: the reference of what sharing the data itself would give,
  not private: each hospital's own [extractor + MIL] trained on *every*
  hospital's training slides seen through its own extractor (one
  ``pooled_mil`` run per hospital, scored at that hospital);
* ``fedhd_<ablation>`` for the paper's ablations: ``fedhd_m1`` (one Gaussian
  per slide), ``fedhd_many`` (4 synthetic slides per class), ``fedhd_direct``
  (no curriculum), ``fedhd_ce`` (cross-entropy instead of GCE).

    python benchmarks/bench_fedhd_rendered.py --bags DIR --out DIR --methods local fedhe
    python benchmarks/bench_fedhd_rendered.py ... --methods fedhe histofs desa \\
        train.rounds=10 train.local_epochs=5   # the methods that exchange every round

A ``key=value`` after ``--methods`` is an override of every method's config.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from _common import run_wall, setup_threads, split_overrides
from bench_fedhd_hetero import finished, pairing, table, variant

from fedpath.config import load_config
from fedpath.data.rendered_slides import RenderedSlides, write_rendered_bags
from fedpath.evaluation.paired import compare_all, to_markdown
from fedpath.evaluation.tables import ResultRow
from fedpath.runtime.experiment import collect_rows, load_dataset, run_experiment
from fedpath.tasks.bags import BagTask
from fedpath.utils.progress_display import make_reporter

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs/fedhd/rendered.yaml"
#: the slide set of configs/fedhd/rendered.yaml, fixed before any method ran
SPEC = RenderedSlides(
    hospitals=4, slides=80, patches=48, tumour=(0.04, 0.12), image_size=96, seed=0
)
ABLATIONS = {
    "fedhd_m1": ["algorithm.params.components=1"],
    "fedhd_many": ["algorithm.params.many_to_one=4"],
    "fedhd_direct": ["algorithm.params.curriculum=false"],
    "fedhd_ce": ["algorithm.params.loss_synthetic=ce"],
}


def base_overrides(bags: Path) -> list[str]:
    """``data.root`` and every hospital's feature folder moved under ``bags``."""
    raw = load_config(CONFIG)
    feats = {
        k: {**v, "root": str(bags / Path(v["root"]).name)}
        for k, v in raw.algorithm.params["features"].items()
    }
    return [
        f"data.root={bags / Path(str(raw.data.root)).name}",
        f"algorithm.params.features={json.dumps(feats)}",
    ]


def pooled_own_configs(common: list[str], out: Path) -> list[tuple[str, Any]]:
    """(hospital, config) of the pooled_mil run in each hospital's own space
    with its own MIL model, written under ``out/<hospital>``."""
    base = load_config(CONFIG, common)
    p = base.algorithm.params
    cfgs = []
    for domain, arch in p["models"].items():
        feat = p["features"].get(domain)
        root = feat["root"] if feat else str(base.data.root)
        space = feat["embedding_space"] if feat else base.data.params["embedding_space"]
        arch_params = p.get("model_params", {}).get(arch, {})
        over = [
            *common,
            "algorithm.params={}",
            "algorithm.name=pooled_mil",
            f"data.root={root}",
            f"data.params.embedding_space={space}",
            f"model.backbone={arch}",
            f"model.params={json.dumps(arch_params)}",
            f"output_dir={out / domain}",
            "label=pooled_own",
        ]
        cfgs.append((domain, load_config(CONFIG, over)))
    return cfgs


def pooled_own(common: list[str], out: Path) -> list[ResultRow]:
    """Run :func:`pooled_own_configs`; each hospital's row from its own run."""
    rows: list[ResultRow] = []
    for domain, cfg in pooled_own_configs(common, out):
        if len(finished(out / domain)) < len(cfg.seeds):
            run_experiment(cfg, resume=True)
        rows += [
            r
            for r in collect_rows([out / domain], "clients")
            if r.target.split("/")[0] == domain
        ]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bags", type=Path, default=Path("runs/fedhd_rendered/bags"))
    ap.add_argument("--out", type=Path, default=Path("runs/fedhd_rendered"))
    ap.add_argument("--methods", nargs="+", default=["local", "fedhd"])
    ap.add_argument("--baseline", default="local")
    ap.add_argument("overrides", nargs="*", default=[])
    args = ap.parse_args()
    split_overrides(args, ("methods",))
    os.environ.setdefault("FEDPATH_QUIET", "1")
    setup_threads()
    bags = args.bags.resolve()
    with make_reporter(False) as rep:
        write_rendered_bags(bags, SPEC, ["lite0", "lite2", "lite0_s5", "lite2_s5"], rep)
    common = [*base_overrides(bags), "runtime.threads=1", *args.overrides]
    base = load_config(CONFIG, common)
    dataset = load_dataset(base.data)
    task = BagTask(base, dataset)
    rows: dict[str, list[ResultRow]] = {}
    labels: dict[str, str] = {}
    for method in dict.fromkeys([args.baseline, *args.methods]):
        out = args.out / method
        if method == "pooled_own":
            got = pooled_own(common, out)
        else:
            over = ABLATIONS.get(method) or variant(method, base, args.overrides)
            cfg = load_config(
                CONFIG, [*common, *over, f"output_dir={out}", f"label={method}"]
            )
            if len(finished(out)) < len(cfg.seeds):  # else: reuse
                run_experiment(cfg, resume=True, dataset=dataset)
            got = collect_rows([out], "clients")
        rows[method] = [replace(r, method=method) for r in got]
        for r in got:
            labels.setdefault(r.target, pairing(base, task, r.target))
        wall = sum(run_wall(f.parent) for f in finished(out))
        print(f"{method}: {len(got)} units, {wall:.0f} s", file=sys.stderr, flush=True)
    print(f"\n{CONFIG.name}, seeds {base.seeds}; each hospital's own 60 test slides")
    flat = [r for rs in rows.values() for r in rs]
    for metric in ("balanced_accuracy", "auroc"):
        print(f"\n{metric} (%), mean ± std over seeds\n")
        print(table(rows, metric, labels))
        if len(rows) > 1:
            print(f"\npaired with {args.baseline} over (hospital, seed) units\n")
            print(to_markdown(compare_all(flat, args.baseline, metric)))


if __name__ == "__main__":
    main()
