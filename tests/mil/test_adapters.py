"""Input adapters for MIL models that receive slides of foreign embedding spaces."""

from __future__ import annotations

import pytest
import torch

from fedpath.mil.adapters import AdaptedMIL, space_key
from fedpath.mil.models import build_mil_model


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_adapter_shapes_per_source_space(kind: str) -> None:
    model = build_mil_model("abmil", 8, 2, {"hidden": 16, "attn_dim": 8})
    net = AdaptedMIL(model, {"uni-v1.0": 5, "r50": 12}, kind, hidden=6)  # type: ignore[arg-type]
    assert set(net.adapters) == {space_key("uni-v1.0"), "r50"} == {"uni-v1_0", "r50"}
    for space, d in (("uni-v1.0", 5), ("r50", 12)):
        layers = net.adapters[space_key(space)]
        assert isinstance(layers, torch.nn.Sequential)
        assert layers[0].normalized_shape == (d,)  # LayerNorm over the source dim
        assert layers[1].weight.shape == ((8, d) if kind == "linear" else (6, d))
        assert layers[-1].out_features == 8
        out = net.adapt(torch.randn(7, d), space)
        assert out.shape == (7, 8)
        assert net(out).logits.shape == (1, 2)
    with pytest.raises(ValueError, match=r"\(N, 5\)"):
        net.adapt(torch.randn(3, 12), "uni-v1.0")
    with pytest.raises(KeyError, match="no input adapter for embedding space 'phikon'"):
        net.adapt(torch.randn(3, 4), "phikon")
    # the wrapped model is the deployable one: its weights have no adapter entries
    assert not any(k.startswith("adapters") for k in net.model.state_dict())
