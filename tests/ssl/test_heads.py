"""Self-supervised heads (fedpath.ssl.heads): shapes, the split of FedAD's g_k
and the fixed teacher projection p_g."""

from __future__ import annotations

import torch
from torch import nn

from fedpath.ssl.heads import DisentanglingHead, ProjectionHead, teacher_projection


def test_projection_head_is_linear_relu_linear() -> None:
    head = ProjectionHead(6, out_dim=4, hidden=5)
    first, relu, second = head.net
    assert isinstance(first, nn.Linear) and isinstance(second, nn.Linear)
    assert isinstance(relu, nn.ReLU)
    assert (first.in_features, first.out_features) == (6, 5)
    assert (second.in_features, second.out_features) == (5, 4)
    h = torch.randn(3, 6, generator=torch.Generator().manual_seed(0))
    expected = second(torch.relu(first(h)))
    torch.testing.assert_close(head(h), expected)
    assert ProjectionHead(6).net[0].out_features == 6  # hidden defaults to in_dim


def test_disentangling_head_splits_one_mlp_output() -> None:
    head = DisentanglingHead(8, semantic_dim=3, domain_dim=2, hidden=7)
    h = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    z_s, z_d = head(h)
    assert z_s.shape == (4, 3) and z_d.shape == (4, 2)
    torch.testing.assert_close(torch.cat([z_s, z_d], 1), head.mlp(h))


def test_teacher_projection_is_fixed_by_the_seed_and_untrained() -> None:
    a, b = teacher_projection(64, 16, seed=3), teacher_projection(64, 16, seed=3)
    assert torch.equal(a.weight, b.weight) and a.bias is None
    assert not a.weight.requires_grad
    assert not torch.equal(a.weight, teacher_projection(64, 16, seed=4).weight)
    g = torch.Generator().manual_seed(3)
    torch.testing.assert_close(a.weight, torch.randn(16, 64, generator=g) / 8.0)
