"""Calibrate the synthetic stain shift: leave-one-hospital-out accuracy of a small CNN.

Plain PyTorch on purpose (no fedpath runtime), so that it checks the *data*: for
each hospital as the unseen target, a small CNN is trained on the other hospitals
pooled (80 % of their patches) and evaluated on the held-out 20 % of the sources
and on the whole target. A good benchmark has high source accuracy (the
morphological task is learnable) and a clear drop on at least some targets (the
stain/scanner shift matters). It also prints the histogram shape (skewness, excess
kurtosis) of each hospital's green-channel intensity, the quantity tested in
``tests/data/test_synthetic_render.py``.

Usage::

    python benchmarks/calibrate_synthetic_shift.py [--per-hospital 400] [--epochs 6]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.stats
import torch
from torch import nn

from fedpath.data.synthetic_render import make_hospital_profiles, render_patches


def small_cnn() -> nn.Module:
    """4 x (conv3x3-BN-ReLU-maxpool) with widths 16..128, global pool, linear head."""
    layers: list[nn.Module] = []
    width_in = 3
    for width in (16, 32, 64, 128):
        layers += [
            nn.Conv2d(width_in, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        ]
        width_in = width
    return nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width_in, 2)
    )


def to_input(images: np.ndarray) -> torch.Tensor:
    """uint8 (N, 3, H, W) -> float in [0, 1], normalised by mean 0.5, std 0.25."""
    return (torch.from_numpy(images).float() / 255.0 - 0.5) / 0.25


def train(x: torch.Tensor, y: torch.Tensor, epochs: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = small_cnn()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=gen).split(32):
            opt.zero_grad()
            loss_fn(model(x[idx]), y[idx]).backward()
            opt.step()
    return model


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    pred = torch.cat([model(b).argmax(1) for b in x.split(256)])
    return float((pred == y).float().mean())


def green_moments(images: np.ndarray) -> tuple[float, float]:
    """Skewness and excess kurtosis of the green-channel intensity, all pixels."""
    green = images[:, 1].astype(np.float64).ravel()
    return float(scipy.stats.skew(green)), float(scipy.stats.kurtosis(green))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hospitals", type=int, default=4)
    parser.add_argument("--per-hospital", type=int, default=400)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="training seeds averaged per target (one run is noisy: the unseen-"
        "hospital accuracy of a 180-step CNN can swing by 20+ points between "
        "seeds, depending on where its decision threshold happens to land)",
    )
    args = parser.parse_args()
    torch.set_num_threads(2)
    start = time.perf_counter()

    rng = np.random.default_rng(args.seed)
    data = []
    for profile in make_hospital_profiles(args.hospitals, seed=args.seed):
        labels = rng.permutation(np.arange(args.per_hospital) % 2)
        slides = np.arange(args.per_hospital) * 8 // args.per_hospital
        images = render_patches(
            labels, profile, args.image_size, seed=args.seed, slide_ids=slides
        )
        is_train = rng.random(args.per_hospital) < 0.8
        data.append((profile.name, images, labels, is_train))
    print(
        f"rendered {args.hospitals} x {args.per_hospital} patches in "
        f"{time.perf_counter() - start:.1f}s"
    )

    print("\nhospital     green skew  green ex.kurt")
    for name, images, _, _ in data:
        skew, kurt = green_moments(images)
        print(f"{name:<12} {skew:+10.2f} {kurt:+14.2f}")

    print(f"\nmean over {args.repeats} training seed(s); per-seed target acc in []")
    print("target       source acc  target acc   drop  per-seed target")
    drops = []
    for t, (target, t_img, t_lab, _) in enumerate(data):
        sources = [d for s, d in enumerate(data) if s != t]
        x_tr = to_input(np.concatenate([im[m] for _, im, _, m in sources]))
        y_tr = torch.from_numpy(np.concatenate([lb[m] for _, _, lb, m in sources]))
        x_va = to_input(np.concatenate([im[~m] for _, im, _, m in sources]))
        y_va = torch.from_numpy(np.concatenate([lb[~m] for _, _, lb, m in sources]))
        x_t, y_t = to_input(t_img), torch.from_numpy(t_lab)
        src_acc, tgt_acc = [], []
        for r in range(args.repeats):
            model = train(x_tr, y_tr, args.epochs, args.seed + 100 * r + t)
            src_acc.append(accuracy(model, x_va, y_va))
            tgt_acc.append(accuracy(model, x_t, y_t))
        src, tgt = float(np.mean(src_acc)), float(np.mean(tgt_acc))
        drops.append(src - tgt)
        seeds = " ".join(f"{100 * a:.1f}" for a in tgt_acc)
        print(
            f"{target:<12} {100 * src:10.1f} {100 * tgt:11.1f} "
            f"{100 * (src - tgt):6.1f}  [{seeds}]"
        )
    print(
        f"\nmean drop {100 * np.mean(drops):.1f} points; "
        f"total {time.perf_counter() - start:.0f}s"
    )


if __name__ == "__main__":
    main()
