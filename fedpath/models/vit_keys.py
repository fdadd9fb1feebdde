"""Checkpoint key layouts of published ViT encoders, mapped onto fedpath's ViT.

Two layouts are read:

* **timm** ``VisionTransformer`` (UNI publishes its ViT-L/16 this way):
  ``cls_token``, ``pos_embed``, ``patch_embed.proj.*``, ``blocks.N.{norm1, attn.qkv,
  attn.proj, ls1.gamma, norm2, mlp.fc1, mlp.fc2, ls2.gamma}``, ``norm.*``.
* **Hugging Face** ``ViTModel`` (Phikon): ``embeddings.*``,
  ``encoder.layer.N.{layernorm_before, attention.attention.{query,key,value},
  attention.output.dense, layernorm_after, intermediate.dense, output.dense}``,
  ``layernorm.*`` -- the hub layout, which ``save_pretrained`` still writes -- or
  transformers 5's in-memory ``layers.N.{attention.{q,k,v,o}_proj, mlp.fc1,
  mlp.fc2, ...}``. HF keeps query, key and value as three linears, timm as one
  ``qkv`` linear with the rows stacked in that order.

Both become fedpath keys relative to the encoder: ``stem.{cls_token, pos_embed,
patch_embed.*}``, ``stages.S.J.*`` (block N is block J of stage S) and ``norm.*``.
Classification heads (``head.*``, HF ``pooler.*``) and HF's ``mask_token`` are
dropped; any other key is kept as it is, so the strict load reports it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import torch

# (block-key pattern, renames): the hub layout that ViTModel.save_pretrained
# writes (Phikon's files), then the in-memory layout of transformers >= 5
_HF_LAYOUTS = (
    (
        re.compile(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias)"),
        {
            "layernorm_before": "norm1",
            "attention.attention.query": "q",
            "attention.attention.key": "k",
            "attention.attention.value": "v",
            "attention.output.dense": "attn.proj",
            "layernorm_after": "norm2",
            "intermediate.dense": "mlp.fc1",
            "output.dense": "mlp.fc2",
        },
    ),
    (
        re.compile(r"layers\.(\d+)\.(.+)\.(weight|bias)"),
        {
            "layernorm_before": "norm1",
            "attention.q_proj": "q",
            "attention.k_proj": "k",
            "attention.v_proj": "v",
            "attention.o_proj": "attn.proj",
            "layernorm_after": "norm2",
            "mlp.fc1": "mlp.fc1",
            "mlp.fc2": "mlp.fc2",
        },
    ),
)
_HF_TOP = {
    "embeddings.cls_token": "cls_token",
    "embeddings.position_embeddings": "pos_embed",
    "embeddings.patch_embeddings.projection.weight": "patch_embed.proj.weight",
    "embeddings.patch_embeddings.projection.bias": "patch_embed.proj.bias",
    "layernorm.weight": "norm.weight",
    "layernorm.bias": "norm.bias",
}
_DROPPED = ("head.", "pooler.", "embeddings.mask_token")


def is_hf_layout(state: Mapping[str, torch.Tensor]) -> bool:
    """True for a Hugging Face ``ViTModel`` state_dict (maybe ``vit.``-prefixed)."""
    return any(k.startswith(("embeddings.", "vit.embeddings.")) for k in state)


def _hf_block(key: str) -> tuple[int, str, str] | None:
    """(block index, timm part or q/k/v, weight|bias) of an HF block key."""
    for pattern, renames in _HF_LAYOUTS:
        m = pattern.fullmatch(key)
        if m and m[2] in renames:
            return int(m[1]), renames[m[2]], m[3]
    return None


def hf_to_timm(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a Hugging Face ``ViTModel`` state_dict to timm's layout."""
    out: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[int, str], dict[str, tuple[str, torch.Tensor]]] = {}
    for key, value in state.items():
        # ViTForImageClassification and friends nest the ViTModel under "vit."
        key = key[len("vit.") :] if key.startswith("vit.") else key
        block = _hf_block(key)
        if key in _HF_TOP:
            out[_HF_TOP[key]] = value
        elif block is None:
            out[key] = value  # unknown: kept, so the strict load names it
        elif block[1] in ("q", "k", "v"):
            qkv.setdefault((block[0], block[2]), {})[block[1]] = (key, value)
        else:
            out[f"blocks.{block[0]}.{block[1]}.{block[2]}"] = value
    for (n, kind), parts in qkv.items():
        if set(parts) == {"q", "k", "v"}:  # timm stacks the rows q, k, v
            stacked = [parts[p][1] for p in ("q", "k", "v")]
            out[f"blocks.{n}.attn.qkv.{kind}"] = torch.cat(stacked, 0)
        else:  # an incomplete triple: keep the HF names so the error shows them
            out.update(dict(parts.values()))
    return out


def timm_to_encoder(
    state: Mapping[str, torch.Tensor], stage_sizes: Sequence[int]
) -> dict[str, torch.Tensor]:
    """Rename a timm ``VisionTransformer`` state_dict onto fedpath's ViT encoder."""
    where = [(s, j) for s, size in enumerate(stage_sizes) for j in range(size)]
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.startswith(_DROPPED):
            continue
        head, _, rest = key.partition(".")
        if head in ("cls_token", "pos_embed", "patch_embed", "norm_pre"):
            key = f"stem.{key}"
        elif head == "blocks":
            index, _, rest = rest.partition(".")
            if index.isdigit() and int(index) < len(where):
                s, j = where[int(index)]
                key = f"stages.{s}.{j}.{rest}"
        out[key] = value
    return out


def checkpoint_to_encoder(
    state: Mapping[str, torch.Tensor], stage_sizes: Sequence[int]
) -> tuple[dict[str, torch.Tensor], str]:
    """Map either layout onto the encoder; also returns the layout's name."""
    if is_hf_layout(state):
        return timm_to_encoder(hf_to_timm(state), stage_sizes), "Hugging Face ViTModel"
    return timm_to_encoder(state, stage_sizes), "timm VisionTransformer"
