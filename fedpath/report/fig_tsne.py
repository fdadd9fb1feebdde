"""t-SNE of a model's embeddings, coloured by domain and by class (the FedStain
paper's figure): do the unseen domain's images land among the sources' (a
domain-invariant encoder), and do the classes separate?

:func:`embed` returns the data (deterministic for a seed: the same images, the
same embedding, scikit-learn's t-SNE with a fixed ``random_state``);
:func:`plot_tsne` draws one column per method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from fedpath.report.samples import Samples


@dataclass
class Embedding:
    """``xy`` (N, 2) t-SNE coordinates of the encoder's features of ``samples``."""

    method: str
    xy: np.ndarray
    samples: Samples


@torch.no_grad()
def features(model: torch.nn.Module, x: torch.Tensor, batch: int = 128) -> np.ndarray:
    """The encoder's embeddings z = h(x) of float images in [0, 1]."""
    model.eval()
    out = [model.encode(x[i : i + batch]).float() for i in range(0, len(x), batch)]  # type: ignore[operator]
    return torch.cat(out).numpy()


def embed(method: str, loaded: object, samples: Samples, seed: int) -> Embedding:
    """t-SNE (2-D, PCA start, perplexity up to 30) of ``loaded``'s embeddings."""
    from sklearn.manifold import TSNE

    x = loaded.to_tensor(samples.images)  # type: ignore[attr-defined]
    z = features(loaded.model, x)  # type: ignore[attr-defined]
    z = (z - z.mean(0)) / (z.std(0) + 1e-6)
    perplexity = float(min(30.0, max(2.0, (len(z) - 1) / 3)))
    xy = TSNE(
        n_components=2, init="pca", perplexity=perplexity, random_state=seed
    ).fit_transform(z)
    return Embedding(method, np.asarray(xy, dtype=np.float64), samples)


def plot_tsne(embeddings: Sequence[Embedding]) -> bytes:
    """Two rows (by domain, the unseen one marked; by class) x one column per
    method, as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedpath.report.html import fig_png

    n = len(embeddings)
    fig, axes = plt.subplots(2, n, figsize=(4.2 * n, 8.0), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for j, e in enumerate(embeddings):
        s = e.samples
        domains = list(dict.fromkeys(s.domains.tolist()))
        ax = axes[0, j]
        for k, d in enumerate(domains):
            sel = s.domains == d
            unseen = bool(s.unseen[sel].any())
            ax.scatter(
                e.xy[sel, 0],
                e.xy[sel, 1],
                s=10 if not unseen else 16,
                marker="x" if unseen else "o",
                color=cmap(k % 10),
                alpha=0.75,
                label=f"{d} (unseen)" if unseen else d,
            )
        ax.set_title(f"{e.method}: by domain", fontsize=10)
        ax.legend(fontsize=7, markerscale=1.5)
        ax = axes[1, j]
        for c, name in enumerate(s.class_names):
            sel = s.labels == c
            ax.scatter(
                e.xy[sel, 0],
                e.xy[sel, 1],
                s=10,
                color=cmap((c + 5) % 10),
                alpha=0.75,
                label=name,
            )
        ax.set_title(f"{e.method}: by class", fontsize=10)
        ax.legend(fontsize=7, markerscale=1.5)
        for ax in axes[:, j]:
            ax.set_xticks([])
            ax.set_yticks([])
    fig.tight_layout()
    return fig_png(fig)
