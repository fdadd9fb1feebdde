"""The attention MIL models: ABMIL, CLAM-SB/MB and ACMIL
(:mod:`fedpath.mil.models_attention`)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedpath.mil.models_attention import CLAM
from tests.mil_helpers import D, small_mil


@pytest.mark.parametrize("name", ["abmil", "clam_sb", "clam_mb", "acmil"])
def test_attention_models_are_permutation_invariant(name: str) -> None:
    model = small_mil(name).eval()
    x = torch.randn(40, D)
    perm = torch.randperm(40)
    a, b = model(x), model(x[perm])
    assert torch.allclose(a.logits, b.logits, atol=1e-5)
    assert torch.allclose(a.attention[:, perm], b.attention, atol=1e-6)


@pytest.mark.parametrize("name", ["clam_sb", "clam_mb"])
def test_clam_instance_loss_small_bags(name: str) -> None:
    model = small_mil(name).train()
    assert isinstance(model, CLAM)
    assert float(model(torch.randn(1, D), 0).aux_loss) == 0.0  # N = 1: no pairs
    out = model(torch.randn(5, D), 2)  # N < k_sample = 8: k = 2
    out.aux_loss.backward()
    true_head, other_head = model.instance_heads[2], model.instance_heads[0]
    assert isinstance(true_head, nn.Linear) and isinstance(other_head, nn.Linear)
    assert true_head.weight.grad is not None  # the true class's classifier
    assert other_head.weight.grad is None  # not subtyping: other classes unused


def test_clam_aux_is_the_weighted_instance_loss() -> None:
    model = small_mil("clam_sb", dropout=0.0).train()
    assert isinstance(model, CLAM)
    x = torch.randn(30, D)
    out = model(x, 1)
    h = model.fc(x)
    inst = model.instance_loss(h, out.attention, 1)
    assert torch.allclose(out.aux_loss, 0.3 / 0.7 * inst)


def test_acmil_stkim_masks_some_top_patches_in_training() -> None:
    model = small_mil("acmil", n_masked_patch=4, mask_drop=0.5)
    x = torch.randn(30, D)
    model.eval()
    top = torch.topk(model(x).attention, 4, dim=1).indices
    model.train()
    att = model(x).attention
    masked = att.gather(1, top) < 1e-12
    assert masked.sum(1).tolist() == [2, 2, 2]  # int(4 * 0.5) per branch
    assert int((att < 1e-12).sum()) == 6


def test_acmil_aux_has_sub_prediction_and_diversity_terms() -> None:
    model = small_mil("acmil", n_masked_patch=0)
    x = torch.randn(30, D)
    out = model.train()(x, 1)
    z = out.attention @ model.fc(x)  # type: ignore[operator]
    sub = torch.stack([h(z[m]) for m, h in enumerate(model.sub_heads)])  # type: ignore[arg-type]
    ce = F.cross_entropy(sub, torch.ones(3, dtype=torch.long))
    a = out.attention
    div = torch.stack(
        [F.cosine_similarity(a[i], a[j], dim=0) for i, j in [(0, 1), (0, 2), (1, 2)]]
    ).mean()
    assert torch.allclose(out.aux_loss, ce + div, atol=1e-6)
