"""Grad-CAM (fedpath.report.fig_gradcam): against a hand-written Grad-CAM, and a
trained run's panel shaped and deterministic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpath.loading import load_model
from fedpath.report.fig_gradcam import cam_panel, gradcam, last_conv
from fedpath.report.runs import find_experiments
from fedpath.report.samples import run_samples


def test_gradcam_weights_the_last_convolution_by_its_gradient() -> None:
    """Against a hand-written Grad-CAM of a two-layer network."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Sequential(
                nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 5, 3, padding=1)
            )
            self.head = nn.Linear(5, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(x).mean((2, 3)))

    net = Net()
    x = torch.rand(2, 3, 8, 8)
    assert last_conv(net) is net.encoder[2]
    maps, pred = gradcam(net, x)
    a = net.encoder(x).detach().requires_grad_(True)
    logits = net.head(a.mean((2, 3)))
    logits.gather(1, logits.argmax(1)[:, None]).sum().backward()
    assert a.grad is not None
    w = a.grad.mean((2, 3), keepdim=True)
    cam = torch.relu((w * a).sum(1)).detach()
    lo = cam.flatten(1).min(1).values[:, None, None]
    hi = cam.flatten(1).max(1).values[:, None, None]
    want = ((cam - lo) / (hi - lo)).numpy()
    assert np.array_equal(pred, logits.argmax(1).numpy())
    np.testing.assert_allclose(maps, want, atol=1e-5)  # same size: no resampling
    vit_like = nn.Sequential(nn.Conv2d(3, 8, 4, stride=4), nn.Flatten())
    assert last_conv(vit_like) is None


def test_gradcam_panel_is_shaped_and_deterministic(suite_dir: Path) -> None:
    (exp,) = find_experiments([suite_dir])
    run = exp.first_run("fedstain")
    assert run is not None and run.model_file is not None
    model = load_model(run.model_file)
    s = run_samples(run, per_domain=10, seed=0)
    p1, p2 = cam_panel("x", model, s, 2, 0), cam_panel("x", model, s, 2, 0)
    assert p1.maps.shape == (len(p1.images), 32, 32) and len(p1.images) >= 2
    assert np.array_equal(p1.maps, p2.maps) and np.array_equal(p1.preds, p2.preds)
    assert p1.maps.min() >= 0.0 and p1.maps.max() == pytest.approx(1.0)
    assert (p1.labels == p1.preds)[: min(2, int((p1.labels == p1.preds).sum()))].all()


def test_a_consortium_run_has_no_unseen_images_to_explain() -> None:
    """Consortium mode holds no hospital out: Grad-CAM names why it is not
    drawn (before: a tensor reshape error)."""
    import torch

    from fedpath.report.samples import Samples

    samples = Samples(
        torch.zeros(2, 3, 8, 8, dtype=torch.uint8),
        np.array([0, 1]),
        np.array(["a", "b"]),
        np.array([False, False]),
        ["normal", "tumour"],
        "none",
    )
    with pytest.raises(ValueError, match="consortium run"):
        cam_panel("fedavg", object(), samples, 2, 0)
