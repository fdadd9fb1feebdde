"""Grad-CAM (Selvaraju et al., ICCV 2017) on unseen-domain patches: where the
model looks when it is right and when it is wrong (the FedStain paper's figure).

The map is taken at the encoder's last convolutional layer (for every CNN
backbone: the small CNN, ResNets, the pretrained EfficientNet-Lites): the
layer's activations A_k weighted by the spatial mean of d(logit of the
predicted class)/dA_k, summed over channels, ReLU, upsampled to the image and
scaled to [0, 1] per image. Vision transformers have no such layer (their only
convolution is the patch embedding); :func:`last_conv` says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedpath.report.samples import Samples


def last_conv(model: nn.Module) -> nn.Conv2d | None:
    """The encoder's last ``Conv2d`` with a spatial kernel or after the stem
    (None for a transformer: only its patch embedding is a convolution)."""
    encoder = getattr(model, "encoder", model)
    convs = [m for m in encoder.modules() if isinstance(m, nn.Conv2d)]
    if len(convs) <= 1:
        return None
    return convs[-1]


def gradcam(model: nn.Module, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(maps (B, H, W) in [0, 1], predicted class (B,)) for float images in [0, 1]."""
    layer = last_conv(model)
    if layer is None:
        raise ValueError("Grad-CAM needs a convolutional encoder layer; none found")
    store: dict[str, torch.Tensor] = {}

    def keep(_m: nn.Module, _i: object, out: torch.Tensor) -> None:
        out.retain_grad()
        store["a"] = out

    handle = layer.register_forward_hook(keep)
    model.eval()
    try:
        with torch.enable_grad():
            xin = x.clone().requires_grad_(True)  # gradients flow even if frozen
            logits = model(xin)
            pred = logits.argmax(1)
            model.zero_grad(set_to_none=True)
            logits.gather(1, pred[:, None]).sum().backward()
        a, g = store["a"], store["a"].grad
        assert g is not None
        weights = g.float().mean(dim=(2, 3), keepdim=True)
        cam = torch.relu((weights * a.float()).sum(1, keepdim=True)).detach()
        cam = nn.functional.interpolate(
            cam, size=x.shape[-2:], mode="bilinear", align_corners=False
        )[:, 0]
        flat = cam.reshape(len(cam), -1)
        lo, hi = flat.min(1).values, flat.max(1).values
        cam = (cam - lo[:, None, None]) / (hi - lo).clamp_min(1e-12)[:, None, None]
    finally:
        handle.remove()
        model.zero_grad(set_to_none=True)
    return cam.numpy(), pred.numpy()


@dataclass
class CamPanel:
    """``images`` float (B, 3, H, W), their ``maps``, truth and prediction."""

    method: str
    images: np.ndarray
    maps: np.ndarray
    labels: np.ndarray
    preds: np.ndarray
    class_names: list[str]


def cam_panel(
    method: str, loaded: object, samples: Samples, per_kind: int, seed: int
) -> CamPanel:
    """Grad-CAM of up to ``per_kind`` correct and ``per_kind`` wrong predictions
    among ``samples``' unseen-domain images (chosen with ``seed``)."""
    idx = np.flatnonzero(samples.unseen)
    if not idx.size:  # the report names why the figure is missing
        raise ValueError(
            "no unseen-domain images (a consortium run, lodo.targets: none, "
            "holds no hospital out)"
        )
    x = loaded.to_tensor(samples.images[idx])  # type: ignore[attr-defined]
    model = loaded.model  # type: ignore[attr-defined]
    with torch.no_grad():
        pred = model(x).argmax(1).numpy()
    right = np.flatnonzero(pred == samples.labels[idx])
    wrong = np.flatnonzero(pred != samples.labels[idx])
    rng = np.random.default_rng(seed)
    pick = np.concatenate(
        [
            rng.choice(right, size=min(per_kind, len(right)), replace=False),
            rng.choice(wrong, size=min(per_kind, len(wrong)), replace=False),
        ]
    ).astype(np.int64)
    maps, preds = gradcam(model, x[pick])
    return CamPanel(
        method,
        x[pick].numpy(),
        maps,
        samples.labels[idx][pick],
        preds,
        samples.class_names,
    )


def plot_gradcam(panels: Sequence[CamPanel]) -> bytes:
    """One row per method: each patch with its map overlaid, titled truth ->
    prediction (green right, red wrong)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedpath.report.html import fig_png

    cols = max(len(p.images) for p in panels)
    fig, axes = plt.subplots(
        len(panels), cols, figsize=(1.9 * cols, 2.2 * len(panels)), squeeze=False
    )
    for i, p in enumerate(panels):
        for j in range(cols):
            ax = axes[i, j]
            ax.axis("off")
            if j >= len(p.images):
                continue
            ax.imshow(p.images[j].transpose(1, 2, 0).clip(0, 1))
            ax.imshow(p.maps[j], cmap="jet", alpha=0.4, vmin=0, vmax=1)
            ok = p.labels[j] == p.preds[j]
            ax.set_title(
                f"{p.class_names[p.labels[j]]} -> {p.class_names[p.preds[j]]}",
                fontsize=7,
                color="green" if ok else "red",
            )
        axes[i, 0].text(
            -0.1,
            0.5,
            p.method,
            transform=axes[i, 0].transAxes,
            ha="right",
            va="center",
            fontsize=9,
            rotation=90,
        )
    fig.tight_layout()
    return fig_png(fig)
