"""FedHD on real slide bags: AMi-Br crops grouped by slide, one hospital per scanner.

Builds bags from the AMi-Br crops (``--data DIR`` or ``FEDPATH_AMIBR``) and runs
the FedHD suite on them:

1. every crop of a slide is one instance of that slide's bag; the bag label is
   ``atypical`` when the slide has at least one atypical mitotic figure; the
   domain (hospital) is the scanner;
2. slides are split into train/test per (scanner, label) exactly as the
   ``clam_bags`` dataset will split them (same function, same seed);
3. the feature extractor is a small CNN trained (crop-level normal vs atypical,
   supervised) on the crops of the *training slides only*; it stands in for the
   pathology foundation model a hospital would use. It is trained on the pooled
   training crops, a shortcut of this benchmark, not part of any method; no test
   slide is ever seen;
4. every crop is embedded (128-d), bags are written in CLAM's layout
   (``pt_files/<slide>.pt`` + ``slides.csv``) under ``--bags``;
5. ``configs/fedhd/amibr_methods.yaml`` runs local-only, FedAvg-MIL, mean matching,
   FedHD and pooled training on them, seeds 0-2, and prints the clients x methods
   tables (balanced accuracy, AUROC).

    python benchmarks/bench_fedhd_amibr.py --data /path/to/amibr [--bags DIR]
"""

from __future__ import annotations

import argparse
import csv
import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from _common import amibr_root, setup_threads

from fedpath.cli import main as fedpath_main
from fedpath.config import ModelConfig, load_config
from fedpath.mil.bags import BagDataset, SlideBag
from fedpath.models.backbones import build_model
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks.images import encode_images, fit_images

TEST_FRACTION, SPLIT_SEED = 0.3, 0


def build_bags(amibr: str, out: Path, epochs: int) -> None:
    cfg = load_config(
        None,
        [
            "data.name=manifest",
            f"data.root={amibr}",
            "data.params={path: manifest.csv, image_size: 64, "
            "classes: [normal, atypical], test_fraction: 0}",
            "train.batch_size=64",
            f"train.local_epochs={epochs}",
            "train.lr=0.001",
            "train.rounds=1",
        ],
    )
    ds = load_dataset(cfg.data)
    keys = list(zip(ds.domain_of.tolist(), ds.slide_of.tolist(), strict=True))
    slides = list(dict.fromkeys(keys))
    members: dict[tuple[str, str], list[int]] = {s: [] for s in slides}
    for i, key in enumerate(keys):
        members[key].append(i)
    sid = {s: f"{s[0]}_{s[1]}".replace("/", "_") for s in slides}
    label = {s: int(any(ds.labels[i] == 1 for i in members[s])) for s in slides}
    # the split clam_bags will make (same order, same function, same seed)
    dummy = BagDataset(
        [SlideBag(sid[s], torch.zeros(1, 1), label[s], s[0]) for s in slides],
        ["normal", "atypical"],
        "dummy",
    )
    _, test = dummy.train_test_split(TEST_FRACTION, SPLIT_SEED)
    test_ids = {b.slide_id for b in test.bags}
    train_rows = np.array(
        [i for s in slides if sid[s] not in test_ids for i in members[s]]
    )
    everything = ds.split(ds.domains[0], "all")
    for d in ds.domains[1:]:
        everything = type(everything).concat([everything, ds.split(d, "all")])
    position = {int(g): p for p, g in enumerate(everything.indices)}
    train_split = everything.subset([position[int(i)] for i in train_rows])
    torch.manual_seed(0)
    model = build_model(ModelConfig(), ds.num_classes)
    stats = fit_images(
        model,
        train_split,
        lambda m, x, y: {"loss": torch.nn.functional.cross_entropy(m(x), y)},
        cfg.train,
        round_idx=1,
        seed=0,
        device=torch.device("cpu"),
    )
    print(
        f"extractor: small CNN, {epochs} epochs on {len(train_split)} crops of "
        f"{len(slides) - len(test_ids)} training slides, final loss {stats['loss']:.3f}"
    )
    feats = encode_images(model, everything, 256, torch.device("cpu"))
    (out / "pt_files").mkdir(parents=True, exist_ok=True)
    with (out / "slides.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["slide_id", "label", "domain"])
        for s in slides:
            rows = [position[i] for i in members[s]]
            torch.save(
                torch.from_numpy(feats[rows]).float(), out / "pt_files" / f"{sid[s]}.pt"
            )
            w.writerow([sid[s], ["normal", "atypical"][label[s]], s[0]])
    pos = sum(label.values())
    print(
        f"bags: {len(slides)} slides ({pos} with an atypical figure), "
        f"{feats.shape[0]} crops, D = {feats.shape[1]}, written to {out}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=os.environ.get("FEDPATH_AMIBR"))
    ap.add_argument("--bags", type=Path, default=Path("runs/amibr_bags"))
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("overrides", nargs="*", default=["seeds=[0,1,2]"])
    args = ap.parse_args()
    amibr = amibr_root(args.data)
    setup_threads()
    if not (args.bags / "slides.csv").is_file():
        build_bags(amibr, args.bags, args.epochs)
    with tempfile.TemporaryDirectory() as tmp:
        code = fedpath_main(
            [
                "suite",
                "configs/fedhd/amibr_methods.yaml",
                f"data.root={args.bags.resolve()}",
                f"output_dir={args.out or tmp}",
                *args.overrides,
                "--quiet",
            ]
        )
    raise SystemExit(code)


if __name__ == "__main__":
    main()
