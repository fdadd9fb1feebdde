"""Stain-distribution analysis per domain (FedStain Fig. 3).

For every domain (hospital/scanner): the pooled distribution of a stain-intensity
channel over sampled images, drawn as a density histogram with the Gaussian of the
same mean and std (dashed), a normal Q-Q plot, and bars of skewness and excess
kurtosis. The numbers go to a CSV beside the PNG, so the figure is reproducible
and its values citable.

Channels: ``gray`` (luminance 0.299 R + 0.587 G + 0.114 B, default), ``r``, ``g``,
``b``, ``L`` (CIE lightness), ``H`` / ``E`` (colour-deconvolved optical densities).
The FedStain paper does not say which intensity Fig. 3 shows; luminance is where
both stains and the scanner's tone curve act, so it is the default.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from scipy import stats as sstats

from fedpath.data.base import DomainDataset
from fedpath.stain.color import to_space
from fedpath.utils.io import atomic_write_bytes, atomic_write_text

CHANNELS = ("gray", "r", "g", "b", "L", "H", "E")


@dataclass(frozen=True)
class DomainStainStats:
    """Pooled-pixel moments of one domain's channel (kurtosis is excess)."""

    domain: str
    images: int
    pixels: int
    mean: float
    std: float
    skewness: float
    excess_kurtosis: float
    image_skewness_mean: float
    image_kurtosis_mean: float


def channel_values(x: torch.Tensor, channel: str) -> torch.Tensor:
    """(B, H*W) values of ``channel`` for RGB images x in [0, 1]."""
    if channel == "gray":
        v = 0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]
    elif channel in ("r", "g", "b"):
        v = x[:, "rgb".index(channel)]
    elif channel == "L":
        v = to_space(x, "lab")[:, 0]
    elif channel in ("H", "E"):
        v = to_space(x, "hed")[:, "HE".index(channel)]
    else:
        raise ValueError(
            f"channel must be one of {', '.join(CHANNELS)}, got {channel!r}"
        )
    return v.flatten(1)


def domain_samples(
    ds: DomainDataset, domain: str, channel: str, images: int, pixels: int, seed: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """(pooled pixel sample, per-image [skew, kurt], images used) of one domain."""
    split = ds.split(domain, "all")
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(split), size=min(images, len(split)), replace=False))
    values, per_image = [], []
    for s in range(0, len(pick), 64):
        x = split.load(pick[s : s + 64]).float().div_(255.0)
        v = channel_values(x, channel).double().numpy()
        values.append(v)
        per_image.append(
            np.stack([sstats.skew(v, axis=1), sstats.kurtosis(v, axis=1)], axis=1)
        )
    allv = np.concatenate(values).ravel()
    take = rng.choice(allv.size, size=min(pixels, allv.size), replace=False)
    per = np.nan_to_num(np.concatenate(per_image))  # constant images -> 0
    return allv[take], per, len(pick)


def analyse(
    ds: DomainDataset,
    channel: str = "gray",
    images: int = 200,
    pixels: int = 200_000,
    seed: int = 0,
    domains: Sequence[str] | None = None,
) -> tuple[list[DomainStainStats], dict[str, np.ndarray]]:
    """Per-domain statistics and the pixel samples they came from."""
    if channel not in CHANNELS:
        raise ValueError(
            f"channel must be one of {', '.join(CHANNELS)}, got {channel!r}"
        )
    rows, samples = [], {}
    for d in domains or ds.domains:
        v, per, n = domain_samples(ds, d, channel, images, pixels, seed)
        samples[d] = v
        rows.append(
            DomainStainStats(
                d,
                n,
                int(v.size),
                float(v.mean()),
                float(v.std()),
                float(sstats.skew(v)),
                float(sstats.kurtosis(v)),
                float(per[:, 0].mean()),
                float(per[:, 1].mean()),
            )
        )
    return rows, samples


def write_report(
    rows: Sequence[DomainStainStats],
    samples: dict[str, np.ndarray],
    out_dir: Path,
    title: str,
    channel: str,
    stem: str = "stain_distribution",
) -> tuple[Path, Path]:
    """Write ``<stem>.png`` (histograms, Q-Q plots, moment bars) and ``<stem>.csv``."""
    png = out_dir / f"{stem}.png"
    atomic_write_bytes(png, stain_figure(rows, samples, title, channel))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(asdict(rows[0])))
    writer.writeheader()
    for r in rows:
        writer.writerow(
            {
                k: (f"{v:.6g}" if isinstance(v, float) else v)
                for k, v in asdict(r).items()
            }
        )
    path_csv = out_dir / f"{stem}.csv"
    atomic_write_text(path_csv, text.getvalue())
    return png, path_csv


def stain_figure(
    rows: Sequence[DomainStainStats],
    samples: dict[str, np.ndarray],
    title: str,
    channel: str,
) -> bytes:
    """The FedStain paper's Fig. 3 as PNG: per domain the intensity histogram with
    its normal fit and a Q-Q plot, and the skewness / kurtosis bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(rows)
    fig = plt.figure(figsize=(3.2 * n, 8.4), constrained_layout=True)
    grid = fig.add_gridspec(3, n)
    for i, r in enumerate(rows):
        v = samples[r.domain]
        ax = fig.add_subplot(grid[0, i])
        ax.hist(v, bins=60, density=True, color="#b0609f", alpha=0.75)
        xs = np.linspace(v.min(), v.max(), 200)
        ax.plot(xs, sstats.norm.pdf(xs, r.mean, r.std), "k--", lw=1.2)
        ax.set_title(
            f"{r.domain}\nskew {r.skewness:+.2f}, ex. kurt {r.excess_kurtosis:+.2f}",
            fontsize=9,
        )
        ax.set_xlabel(f"{channel} intensity", fontsize=8)
        ax = fig.add_subplot(grid[1, i])
        q = np.sort(v[:: max(1, v.size // 2000)])
        theo = sstats.norm.ppf((np.arange(q.size) + 0.5) / q.size)
        ax.plot(theo, (q - r.mean) / max(r.std, 1e-12), ".", ms=2, color="#4b3f8f")
        lim = [min(theo.min(), -3), max(theo.max(), 3)]
        ax.plot(lim, lim, "k-", lw=0.8)
        ax.set_xlabel("normal quantiles", fontsize=8)
        ax.set_ylabel("standardized sample quantiles", fontsize=8)
    ax = fig.add_subplot(grid[2, :])
    pos = np.arange(n)
    ax.bar(
        pos - 0.2, [r.skewness for r in rows], 0.4, label="skewness", color="#b0609f"
    )
    ax.bar(
        pos + 0.2,
        [r.excess_kurtosis for r in rows],
        0.4,
        label="excess kurtosis",
        color="#4b3f8f",
    )
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(pos, [r.domain for r in rows], fontsize=8)
    ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
