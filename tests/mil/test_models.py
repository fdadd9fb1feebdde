"""MIL models (ABMIL, CLAM-SB/MB, TransMIL, ACMIL) and local MIL training."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedpath.config import ConfigError
from fedpath.mil import MIL_MODELS, build_mil_model
from fedpath.mil.transmil import NystromAttention, iterative_pinv
from fedpath.registry import UnknownNameError
from tests.mil_helpers import MIL_SMALL, C, D, small_mil

BRANCHES = {"abmil": 1, "clam_sb": 1, "clam_mb": C, "acmil": 3, "transmil": 1}


def test_registry_lists_the_five_models() -> None:
    assert set(MIL_MODELS.names()) == set(MIL_SMALL)
    with pytest.raises(UnknownNameError, match="abmil, acmil"):
        build_mil_model("abmli", D, C)
    with pytest.raises(ConfigError, match="hiden"):
        build_mil_model("abmil", D, C, {"hiden": 3})
    with pytest.raises(ValueError, match=r"\(N >= 1, 12\)"):
        small_mil("abmil")(torch.randn(4, 5))


@pytest.mark.parametrize("name", sorted(MIL_SMALL))
@pytest.mark.parametrize("n", [1, 3, 7, 30, 70])
def test_shapes_for_every_bag_size(name: str, n: int) -> None:
    model = small_mil(name).eval()
    out = model(torch.randn(n, D))
    assert out.logits.shape == (1, C) and out.aux_loss.shape == ()
    assert out.attention.shape == (BRANCHES[name], n)
    assert torch.allclose(out.attention.sum(1), torch.ones(BRANCHES[name]), atol=1e-5)
    assert out.embedding is not None and out.embedding.shape[0] == 1
    assert float(out.aux_loss) == 0.0  # eval mode: no auxiliary loss


def test_transmil_invariant_only_without_order_dependent_parts() -> None:
    # square N, exact attention (N + 1 <= landmarks), no PPEG, no conv on V
    model = small_mil("transmil", ppeg=False, residual_kernel=0, landmarks=32).eval()
    x = torch.randn(25, D)
    perm = torch.randperm(25)
    assert torch.allclose(model(x).logits, model(x[perm]).logits, atol=1e-5)
    # with PPEG the grid order matters: permuting changes the logits
    full = small_mil("transmil").eval()
    assert not torch.allclose(full(x).logits, full(x[perm]).logits, atol=1e-6)


@pytest.mark.parametrize("name", sorted(MIL_SMALL))
def test_gradients_reach_the_feature_layer(name: str) -> None:
    model = small_mil(name).train()
    out = model(torch.randn(20, D), torch.tensor([1]))
    loss = F.cross_entropy(out.logits, torch.tensor([1])) + out.aux_loss
    loss.backward()
    reduction = model.fc
    assert isinstance(reduction, nn.Sequential)
    first = reduction[0]
    assert isinstance(first, nn.Linear)
    fc = first.weight
    assert fc.grad is not None and bool(fc.grad.abs().sum() > 0)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert all(bool(torch.isfinite(g).all()) for g in grads)
    if name.startswith("clam") or name == "acmil":
        assert float(out.aux_loss.detach()) > 0.0


@torch.no_grad()
def test_iterative_pinv_and_nystrom_attention() -> None:
    torch.manual_seed(0)
    a = torch.softmax(torch.randn(3, 10, 10, dtype=torch.float64), -1)
    assert torch.allclose(iterative_pinv(a, 30), torch.linalg.pinv(a), atol=1e-8)
    attn = NystromAttention(16, 2, landmarks=128, residual_kernel=0)
    x = torch.randn(100, 16)
    out, first = attn(x)
    q, k, v = attn.qkv(x).view(100, 3, 2, 8).permute(1, 2, 0, 3)
    exact = torch.softmax((q * 8**-0.5) @ k.transpose(-1, -2), -1)
    ref = attn.out((exact @ v).transpose(0, 1).reshape(100, -1))
    assert torch.allclose(out, ref, atol=1e-5)  # n <= landmarks: exact path
    assert torch.allclose(first, exact[:, 0], atol=1e-6)
    attn.landmarks = 20  # Nystrom path: an approximation of the same output
    approx, _ = attn(x)
    assert float((approx - ref).norm() / ref.norm()) < 0.3


@pytest.mark.parametrize(
    ("name", "params", "key", "expected"),
    [
        ("abmil", {"hidden": 0}, "hidden", "an integer >= 1 or null, got 0"),
        ("abmil", {"dropout": 1.0}, "dropout", r"a number in \[0, 1\), got 1.0"),
        ("clam_sb", {"attn_dim": 0}, "attn_dim", "an integer >= 1, got 0"),
        ("clam_mb", {"k_sample": -1}, "k_sample", "an integer >= 0, got -1"),
        ("clam_sb", {"bag_weight": 0.0}, "bag_weight", r"a number in \(0, 1\]"),
        ("acmil", {"n_token": 0}, "n_token", "an integer >= 1, got 0"),
        ("acmil", {"mask_drop": 1.0}, "mask_drop", r"a number in \[0, 1\)"),
        ("acmil", {"n_masked_patch": -1}, "n_masked_patch", "an integer >= 0"),
        ("transmil", {"landmarks": 0}, "landmarks", "an integer >= 1, got 0"),
        ("transmil", {"residual_kernel": 4}, "residual_kernel", "an odd integer"),
        ("transmil", {"dropout": -0.1}, "dropout", r"a number in \[0, 1\)"),
        (
            "transmil",
            {"hidden": 16, "heads": 3},
            "heads",
            r"a divisor of hidden \(16\), got 3",
        ),
    ],
)
def test_params_are_checked_naming_the_config_key(
    name: str, params: dict[str, object], key: str, expected: str
) -> None:
    schema = MIL_MODELS.params(name)
    assert schema is not None
    # in code: the key a config would name; from a mapping: the mapping's key
    with pytest.raises(
        ConfigError, match=rf"'model\.params\.{key}': expected {expected}"
    ):
        schema(**params)
    with pytest.raises(ConfigError, match=rf"params\.{key}.: expected {expected}"):
        build_mil_model(name, D, C, params)


def test_model_params_are_checked_when_the_config_loads() -> None:
    from fedpath.config import load_config

    bags = ["data.name=synthetic_bags", "model.backbone=abmil"]
    with pytest.raises(
        ConfigError, match=r"'model\.params\.hidden': expected an integer >= 1"
    ):
        load_config(None, [*bags, "model.params.hidden=0"])
    cfg = load_config(None, [*bags, "model.params.hidden=null"])
    assert cfg.model.params["hidden"] is None  # ABMIL on the raw features: valid
    for name, small in MIL_SMALL.items():  # the defaults and the small sizes are valid
        schema = MIL_MODELS.params(name)
        assert schema is not None
        schema(), schema(**small)
