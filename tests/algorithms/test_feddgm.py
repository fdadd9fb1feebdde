"""FedDGM-approx (FedHD's baseline): sampled slides follow the class mixture."""

from __future__ import annotations

import torch

from fedpath.algorithms.feddgm import sample_slides
from fedpath.mil.gmm import GMM


def test_feddgm_samples_follow_the_mixture() -> None:
    g = GMM(
        weights=torch.tensor([0.75, 0.25]),
        means=torch.tensor([[0.0, 0.0], [8.0, -4.0]]),
        covs=torch.ones(2, 2) * 0.01,
        covariance="diag",
    )
    (bag,) = sample_slides(g, 1, 4000, 1, "h", seed=0)
    assert bag.features.shape == (4000, 2) and bag.label == 1
    near_second = (bag.features[:, 0] > 4).float().mean()
    assert abs(float(near_second) - 0.25) < 0.03
    assert torch.allclose(bag.features.mean(0), torch.tensor([2.0, -1.0]), atol=0.2)
