"""Image model files.

A hospital that never took part in the federation gets one file and fedpath
(the container: :mod:`fedpath.model_file`). An image model's file holds the
weights and the recipe to rebuild and apply them (:class:`ModelMeta`): backbone
name and parameters, number and names of the classes, input size, colour
normalization (inside the model), the fedpath version and the hash of the run's
config; with training-domain validation also a temperature and an operating
point, both fitted on the sources' validation slides
(:mod:`fedpath.runtime.selection`), which :meth:`LoadedModel.predict_proba` and
:meth:`LoadedModel.decide` apply.

The same container holds MIL models of slide bags (``kind: "mil"`` in the header;
a file without ``kind`` is an image model, as every older file is): a run with
``evaluation.protocol: local`` on bags writes each client's deployed model as
``models/<client>.fpm`` (:mod:`fedpath.mil.export`); and ensembles of image
models (``kind: "ensemble"``, :mod:`fedpath.ensemble`).
:func:`fedpath.loading.load_model` reads every kind, by the file's header;
:func:`read_model_file` reads an image model and names it for the others.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar

import numpy as np
import torch
from torch import nn

from fedpath.config import ModelConfig
from fedpath.data.files import centre_box
from fedpath.errors import ArtifactError
from fedpath.model_file import (
    CLASS_NAMES,
    FORMAT,
    LoadedFile,
    check_class_names,
    header_fields,
    model_kind,
    read_container,
    write_container,
)
from fedpath.models.backbones import build_model
from fedpath.models.tta import dihedral_views
from fedpath.schema import Check, Checked, Ge, Gt, Probability, Range
from fedpath.version import __version__

#: the largest image side a model file may ask for (larger: a damaged header,
#: and resizing every input to it would exhaust memory)
MAX_SIDE = 4096


def _side(v: Any) -> bool:
    return isinstance(v, int) and 0 < v <= MAX_SIDE


def _rgb(v: Any, positive: bool = False) -> bool:
    return (
        isinstance(v, list)
        and len(v) == 3
        and all(
            isinstance(x, int | float)
            and not isinstance(x, bool)
            and math.isfinite(x)
            and (x > 0 or not positive)
            for x in v
        )
    )


#: the header fields' constraints (:func:`fedpath.model_file.header_fields`)
Side = Annotated[int, Check(f"a positive integer (at most {MAX_SIDE})", _side)]
OptionalSide = Annotated[
    int | None, Check(f"a positive integer (at most {MAX_SIDE})", _side)
]
Names = Annotated[list[str], Check(CLASS_NAMES, check_class_names)]
Mean = Annotated[list[float], Check("3 finite numbers (R, G, B)", _rgb)]
Std = Annotated[
    list[float],
    Check("3 finite numbers > 0 (R, G, B)", lambda v, rgb=_rgb: rgb(v, True)),
]


@dataclass
class ModelMeta(Checked):
    """What a model file says about itself; each field is checked when it is
    read from a file (:func:`fedpath.model_file.header_fields`) or made."""

    backbone: Annotated[str, Check("a backbone name", bool)]
    backbone_params: dict[str, Any]
    class_names: Names
    image_size: Side
    mean: Mean
    std: Std
    resize: str = "bilinear, antialiased, to image_size x image_size (aspect not kept)"
    #: the central 1/zoom of each image's side is kept before resizing
    #: (``data.params.zoom`` of the run; 1: the whole image, older files too)
    zoom: Annotated[float, Range(1.0, 8.0)] = 1.0
    fedpath_version: str = __version__
    format: int = FORMAT
    config_hash: str = ""
    method: str = ""
    trained_on: list[str] = field(default_factory=list)
    held_out: str = ""
    seed: int | None = None
    #: the run's data config (``name``, ``root``, ``params``): ``fedpath evaluate
    #: MODEL NAME:DOMAIN`` rebuilds the run's data from it ({}: an older file)
    data: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S"))
    # the encoder's own expectations and provenance
    # (fedpath.models.pretrained.encoder_info); defaults keep older files loading
    input_size: OptionalSide = None
    min_image_size: OptionalSide = None
    weights_source: str = ""
    weights_sha256: str = ""
    weights_licence: str = ""
    # which weights (``selection``: last | selected | averaged) and the decision rule
    # fitted on the source validation slides; None: none (older files too)
    round: Annotated[int | None, Ge(0)] = None
    selection: str = ""
    temperature: Annotated[float | None, Gt(0)] = None
    threshold: Annotated[float | None, Probability] = None
    target_sensitivity: Annotated[float | None, Probability] = None
    #: test-time augmentation at prediction (``evaluation.tta`` of the run):
    #: ``dihedral`` averages the softmax over the 8 flips and turns
    tta: str = "none"
    #: the exported weights' figures on the source validation slides (selection
    #: score, n, NLL and ECE before and after the temperature, the operating
    #: point's rates); {}: no validation (older files too)
    validation: dict[str, Any] = field(default_factory=dict)
    #: a consortium model's honest estimate at a new site: the leave-one-
    #: hospital-out runs of its recipe (``evaluation.expected``,
    #: :func:`fedpath.runtime.consortium.expected_estimate`); {}: none
    expected: dict[str, Any] = field(default_factory=dict)
    #: BatchNorm statistics re-estimated on a site's unlabelled images by
    #: ``fedpath adapt-bn`` (:mod:`fedpath.tasks.adapt`): ``images`` (how many),
    #: ``folder`` (its name), ``from_sha256`` (the file adapted), ``when``;
    #: {}: the federation's own statistics
    adapted_bn: dict[str, Any] = field(default_factory=dict)
    #: the BatchNorm layers whose statistics training kept fixed (inside the
    #: frozen first stages, ``train.trainable``): AdaBN leaves them as they are
    #: (``fedpath adapt-bn --all-layers`` adapts them too); []: none (older files)
    bn_fixed: list[str] = field(default_factory=list)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


def save_model(path: Path, model: nn.Module, meta: ModelMeta) -> Path:
    """Write ``model``'s weights and ``meta`` to ``path`` atomically."""
    return write_container(path, asdict(meta), model)


def read_model_file(path: Path) -> tuple[ModelMeta, dict[str, torch.Tensor]]:
    """Read and verify a model file; every failure names the file and the problem."""
    header, weights = read_container(path)
    return _image_meta(header, path), weights


def _image_meta(header: Mapping[str, Any], path: Path) -> ModelMeta:
    """The :class:`ModelMeta` of a verified header; a MIL model's is refused."""
    kind = model_kind(header)
    if kind != "image":
        what = {"mil": "a mil model (slide bags, not images)"}.get(kind, f"an {kind}")
        raise ArtifactError(
            f"model file {str(path)!r} holds {what}; load it with "
            "fedpath.load_model, or use it with `fedpath evaluate` / `fedpath predict`"
        )
    return header_fields(ModelMeta, header, str(path))


class LoadedModel(LoadedFile[ModelMeta]):
    """An image model file ready for inference: ``predict_proba`` on tensors or
    PIL images.

    >>> model = load_model("runs/demo/fedstain/hospital_3/seed0/model.fpm")
    >>> probs = model.predict_proba([Image.open("patch.png")])   # (1, C) numpy
    >>> model.class_names[probs.argmax(1)[0]]
    """

    kind: ClassVar[str] = "image"
    unit: ClassVar[str] = "images"

    def __init__(
        self,
        meta: ModelMeta,
        weights: dict[str, torch.Tensor],
        path: Path | None = None,
    ) -> None:
        super().__init__(meta, path)
        if meta.tta not in ("none", "dihedral"):
            raise ArtifactError(
                f"model file {str(path)!r}: tta must be 'none' or 'dihedral', got "
                f"{meta.tta!r} (a newer fedpath wrote it?)"
            )
        self.model: nn.Module = self._fit(
            lambda: build_model(
                ModelConfig(backbone=meta.backbone, params=meta.backbone_params),
                meta.num_classes,
            ),
            weights,
            f"backbone {meta.backbone!r}",
        )

    @classmethod
    def from_container(
        cls, header: Mapping[str, Any], weights: dict[str, torch.Tensor], path: Path
    ) -> LoadedModel:
        """The image model of a verified header and its weights."""
        return cls(_image_meta(header, path), weights, path)

    @property
    def image_size(self) -> int:
        return self.meta.image_size

    def to_tensor(self, images: Any) -> torch.Tensor:
        """Images -> float (B, 3, S, S) in [0, 1], resized like training did.

        Accepts a uint8 or float tensor (B, 3, H, W) (float in [0, 1]), or a list of
        PIL images / HxWx3 uint8 arrays; with ``zoom`` in the file, the central
        1/zoom of each image is kept first, as training's loader did.
        """
        from PIL import Image

        if isinstance(images, torch.Tensor):
            x = images
            if x.ndim == 3:
                x = x.unsqueeze(0)
            if x.ndim != 4 or x.shape[1] != 3:
                raise ValueError(f"expected images (B, 3, H, W), got {tuple(x.shape)}")
            x = x.float().div(255.0) if x.dtype == torch.uint8 else x.float()
            if self.meta.zoom != 1.0:
                left, top, right, bottom = centre_box(
                    (x.shape[-1], x.shape[-2]), self.meta.zoom
                )
                x = x[..., top:bottom, left:right]
            if x.shape[-2:] != (self.image_size, self.image_size):
                x = torch.nn.functional.interpolate(
                    x,
                    size=(self.image_size, self.image_size),
                    mode="bilinear",
                    antialias=True,
                    align_corners=False,
                )
            return x
        arrays = []
        for im in images:
            pil = im if isinstance(im, Image.Image) else Image.fromarray(np.asarray(im))
            pil = pil.convert("RGB")
            if self.meta.zoom != 1.0:
                pil = pil.crop(centre_box(pil.size, self.meta.zoom))
            if pil.size != (self.image_size, self.image_size):
                pil = pil.resize(
                    (self.image_size, self.image_size),
                    Image.Resampling.BILINEAR,
                    reducing_gap=None,
                )
            arrays.append(np.asarray(pil, dtype=np.uint8).transpose(2, 0, 1))
        return torch.from_numpy(np.stack(arrays)).float().div(255.0)

    @torch.no_grad()
    def predict_proba(self, images: Any, batch_size: int = 256) -> np.ndarray:
        """(N, C) class probabilities, temperature-scaled when the file holds a
        temperature (:meth:`calibrate`), averaged over the 8 dihedral views of
        each image when the file says ``tta: dihedral``."""
        x = self.to_tensor(images)
        out = []
        for i in range(0, len(x), batch_size):
            xb = x[i : i + batch_size]
            views = dihedral_views(xb) if self.meta.tta == "dihedral" else [xb]
            probs = [torch.softmax(self.model(v), 1) for v in views]
            out.append(torch.stack(probs).mean(0))
        if not out:
            return np.zeros((0, self.meta.num_classes))
        return self.calibrate(torch.cat(out).numpy())
