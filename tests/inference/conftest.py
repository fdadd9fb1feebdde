"""Tiny model files of both kinds and a site's files, written in milliseconds."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from fedpath.artifact import LoadedModel, ModelMeta, save_model
from fedpath.config import ModelConfig
from fedpath.loading import load_model
from fedpath.mil.export import LoadedMILModel, MILModelMeta
from fedpath.mil.models import build_mil_model
from fedpath.model_file import write_container
from fedpath.models.backbones import build_model

CLASSES = ["normal", "tumour"]
SIZE = 16
DIM = 4


def image_model_file(path: Path, **meta: object) -> Path:
    """A random small CNN on 16 px images of :data:`CLASSES` as a model file."""
    torch.manual_seed(0)
    net = build_model(ModelConfig(backbone="small_cnn", params={"widths": [4]}), 2)
    head = ModelMeta("small_cnn", {"widths": [4]}, CLASSES, SIZE, [0.5] * 3, [0.2] * 3)
    for key, value in meta.items():
        setattr(head, key, value)
    return save_model(path, net, head)


#: the small CNN of :func:`member`
PARAMS = {"widths": [4]}


def member(path: Path, seed: int, **meta: object) -> Path:
    """A random small CNN (``seed``) on 16 px images as a model file."""
    torch.manual_seed(seed)
    classes = meta.pop("class_names", CLASSES)
    assert isinstance(classes, list)
    net = build_model(ModelConfig(backbone="small_cnn", params=PARAMS), len(classes))
    head = ModelMeta("small_cnn", PARAMS, classes, SIZE, [0.5] * 3, [0.2] * 3)
    head.seed, head.method, head.trained_on = seed, "fedavg", [f"site_{seed}"]
    for key, value in meta.items():
        setattr(head, key, value)
    return save_model(path, net, head)


def mil_model_file(path: Path, **meta: Any) -> Path:
    """A random ABMIL of bags of dimension :data:`DIM` as a model file."""
    torch.manual_seed(0)
    params = {"hidden": 8, "attn_dim": 4}
    net = build_mil_model("abmil", DIM, 2, params)
    head = MILModelMeta("abmil", params, DIM, CLASSES, "synthetic", **meta)
    return write_container(path, asdict(head), net)


@pytest.fixture
def image_model(tmp_path: Path) -> LoadedModel:
    model = load_model(image_model_file(tmp_path / "model.fpm"))
    assert isinstance(model, LoadedModel)
    return model


@pytest.fixture
def mil_model(tmp_path: Path) -> LoadedMILModel:
    model = load_model(mil_model_file(tmp_path / "mil.fpm"))
    assert isinstance(model, LoadedMILModel)
    return model


def write_images(root: Path, per_folder: dict[str, int], seed: int = 0) -> list[Path]:
    """``per_folder[name]`` random 16 px PNGs in ``root/<name>/``."""
    rng = np.random.default_rng(seed)
    out = []
    for name, n in per_folder.items():
        for i in range(n):
            p = root / name / f"{i:02d}.png"
            p.parent.mkdir(parents=True, exist_ok=True)
            img = rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
            Image.fromarray(img).save(p)
            out.append(p)
    return out


def write_bags(root: Path, per_folder: dict[str, int], dim: int = DIM) -> list[Path]:
    """``per_folder[name]`` random ``.pt`` bags of ``dim`` in ``root/<name>/``."""
    g = torch.Generator().manual_seed(0)
    out = []
    for name, n in per_folder.items():
        for i in range(n):
            p = root / name / f"s{name}{i}.pt"
            p.parent.mkdir(parents=True, exist_ok=True)
            torch.save(torch.randn(5 + i, dim, generator=g), p)
            out.append(p)
    return out
