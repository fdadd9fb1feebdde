"""Checkpoint key layouts of ViT encoders (fedpath.models.vit_keys): Hugging Face
and timm names mapped onto fedpath's encoder, on tiny hand-made state dicts."""

from __future__ import annotations

import torch

from fedpath.models.vit_keys import (
    checkpoint_to_encoder,
    hf_to_timm,
    is_hf_layout,
    timm_to_encoder,
)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values)


def test_layout_detection() -> None:
    assert is_hf_layout({"embeddings.cls_token": t(0)})
    assert is_hf_layout({"vit.embeddings.cls_token": t(0)})
    assert not is_hf_layout({"cls_token": t(0), "blocks.0.norm1.weight": t(1)})


def test_hf_blocks_become_timm_with_q_k_v_stacked_in_that_order() -> None:
    hub = {
        "vit.embeddings.cls_token": t(1),
        "embeddings.patch_embeddings.projection.weight": t(2),
        "encoder.layer.0.attention.attention.query.weight": t(10),
        "encoder.layer.0.attention.attention.key.weight": t(11),
        "encoder.layer.0.attention.attention.value.weight": t(12),
        "encoder.layer.0.layernorm_before.bias": t(3),
        "encoder.layer.0.output.dense.weight": t(4),
        "layernorm.weight": t(5),
        "pooler.dense.weight": t(6),
    }
    out = hf_to_timm(hub)
    assert torch.equal(out["blocks.0.attn.qkv.weight"], t(10, 11, 12))
    assert torch.equal(out["cls_token"], t(1))
    assert torch.equal(out["patch_embed.proj.weight"], t(2))
    assert torch.equal(out["blocks.0.norm1.bias"], t(3))
    assert torch.equal(out["blocks.0.mlp.fc2.weight"], t(4))
    assert torch.equal(out["norm.weight"], t(5))
    assert "pooler.dense.weight" in out  # unknown to timm: kept for timm_to_encoder
    # transformers 5's in-memory names map the same way
    v5 = {f"layers.1.attention.{p}_proj.bias": t(i) for i, p in enumerate("qkv")}
    v5["layers.1.attention.o_proj.bias"] = t(9)
    out5 = hf_to_timm(v5)
    assert torch.equal(out5["blocks.1.attn.qkv.bias"], t(0, 1, 2))
    assert torch.equal(out5["blocks.1.attn.proj.bias"], t(9))


def test_an_incomplete_q_k_v_keeps_its_hf_names() -> None:
    key = "encoder.layer.2.attention.attention.query.weight"
    assert list(hf_to_timm({key: t(1)})) == [key]


def test_timm_blocks_are_placed_into_stages_and_heads_dropped() -> None:
    state = {f"blocks.{i}.norm1.weight": t(i) for i in range(5)}
    state |= {"cls_token": t(7), "head.weight": t(8), "norm.bias": t(9)}
    state["blocks.9.extra"] = t(10)  # beyond the encoder's depth: kept as is
    out = timm_to_encoder(state, [3, 2])
    assert sorted(out) == [
        "blocks.9.extra",
        "norm.bias",
        "stages.0.0.norm1.weight",
        "stages.0.1.norm1.weight",
        "stages.0.2.norm1.weight",
        "stages.1.0.norm1.weight",
        "stages.1.1.norm1.weight",
        "stem.cls_token",
    ]
    assert torch.equal(out["stages.1.0.norm1.weight"], t(3))


def test_checkpoint_to_encoder_names_the_layout() -> None:
    hf, name = checkpoint_to_encoder({"embeddings.cls_token": t(1)}, [1])
    assert name == "Hugging Face ViTModel" and list(hf) == ["stem.cls_token"]
    timm, name = checkpoint_to_encoder({"blocks.0.ls1.gamma": t(1)}, [1])
    assert name == "timm VisionTransformer" and list(timm) == ["stages.0.0.ls1.gamma"]
