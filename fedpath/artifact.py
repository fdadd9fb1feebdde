"""Self-describing model artifacts: everything needed to use a model elsewhere.

A hospital that never took part in the federation gets one file and fedpath. The
file holds the weights and the recipe to rebuild and apply them: backbone name and
parameters, number and names of the classes, input size, colour normalization
(inside the model), the fedpath version and the hash of the run's config; with
training-domain validation also a temperature and an operating point, both fitted
on the sources' validation slides (:mod:`fedpath.runtime.selection`), which
:meth:`LoadedModel.predict_proba` and :meth:`LoadedModel.decide` apply.

File layout (format 2)::

    b"FEDPATH-MODEL\\n"                 magic
    8 bytes little-endian               length of the JSON header
    JSON header                         metadata + sha256 + length of the payload
    payload                             torch.save(state_dict), loaded weights_only
    32 bytes                            SHA-256 of everything above

The trailing SHA-256 covers the whole file, header included (class names, the
threshold, the input size), so a truncated or altered file fails with an error
naming it instead of loading garbage or inverting predictions. This is
*integrity*, not *authenticity*: anyone who can write the file can also write a
matching checksum; to know who made a model, compare its SHA-256 with one
received from its maker over a channel you trust (or sign the file). Format 1
files (checksum over the payload only) still load, with a warning. Writing is
atomic.

The same container holds MIL models of slide bags (``kind: "mil"`` in the header;
a file without ``kind`` is an image model, as every older file is): a run with
``evaluation.protocol: local`` on bags writes each client's deployed model as
``models/<client>.fpm`` (:mod:`fedpath.mil.export`). :func:`load_model` and
:func:`read_model_file` read image models only and name :func:`load_mil_model`
for a MIL file; :func:`load_any` reads either.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import struct
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from fedpath import __version__
from fedpath.config import ModelConfig
from fedpath.errors import ArtifactError
from fedpath.models.backbones import FedModel, build_model
from fedpath.utils.io import atomic_write_bytes

if TYPE_CHECKING:
    from fedpath.mil.export import LoadedMILModel

log = logging.getLogger("fedpath")

MAGIC = b"FEDPATH-MODEL\n"
#: 2: a SHA-256 of the whole file at its end (1: of the payload only)
FORMAT = 2
SUFFIX = ".fpm"


@dataclass
class ModelMeta:
    """What a model file says about itself."""

    backbone: str
    backbone_params: dict[str, Any]
    class_names: list[str]
    image_size: int
    mean: list[float]
    std: list[float]
    resize: str = "bilinear, antialiased, to image_size x image_size (aspect not kept)"
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
    input_size: int | None = None
    min_image_size: int | None = None
    weights_source: str = ""
    weights_sha256: str = ""
    weights_licence: str = ""
    # which weights (``selection``: last | selected | averaged) and the decision rule
    # fitted on the source validation slides; None: none (older files too)
    round: int | None = None
    selection: str = ""
    temperature: float | None = None
    threshold: float | None = None
    target_sensitivity: float | None = None
    #: test-time augmentation at prediction (``evaluation.tta`` of the run):
    #: ``dihedral`` averages the softmax over the 8 flips and turns
    tta: str = "none"
    #: BatchNorm statistics re-estimated on a site's unlabelled images by
    #: ``fedpath adapt-bn`` (:mod:`fedpath.tasks.adapt`): ``images`` (how many),
    #: ``folder`` (its name), ``from_sha256`` (the file adapted), ``when``;
    #: {}: the federation's own statistics
    adapted_bn: dict[str, Any] = field(default_factory=dict)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


def save_model(path: Path, model: FedModel, meta: ModelMeta) -> Path:
    """Write ``model``'s weights and ``meta`` to ``path`` atomically."""
    return write_container(path, asdict(meta), model)


def write_container(path: Path, header: Mapping[str, Any], model: nn.Module) -> Path:
    """Write ``header`` (JSON-able metadata) and ``model``'s weights to ``path``
    atomically, in the file layout of the module docstring (format 2, with the
    whole-file SHA-256): the one writer of image (``model.fpm``) and MIL
    (``kind: mil``, :mod:`fedpath.mil.export`) model files."""
    buf = io.BytesIO()
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    torch.save(state, buf)
    payload = buf.getvalue()
    full = {
        **header,
        "payload_bytes": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
    }
    head = json.dumps(full, sort_keys=True).encode()
    body = MAGIC + struct.pack("<Q", len(head)) + head + payload
    atomic_write_bytes(path, body + hashlib.sha256(body).digest())
    return path


def model_kind(header: Mapping[str, Any]) -> str:
    """``image`` (every file without a ``kind``: all files before MIL export) or
    the header's ``kind`` (``mil``: a slide-bag model, :mod:`fedpath.mil.export`)."""
    return str(header.get("kind") or "image")


def read_model_file(path: Path) -> tuple[ModelMeta, dict[str, torch.Tensor]]:
    """Read and verify a model file; every failure names the file and the problem."""
    header, weights = read_container(path)
    return _image_meta(header, path), weights


def _image_meta(header: Mapping[str, Any], path: Path) -> ModelMeta:
    """The :class:`ModelMeta` of a verified header; a MIL model's is refused."""
    if model_kind(header) != "image":
        raise ArtifactError(
            f"model file {str(path)!r} holds a {model_kind(header)} model (slide "
            "bags, not images); load it with fedpath.artifact.load_mil_model, or "
            "use it with `fedpath evaluate` / `fedpath predict`"
        )
    known = {f for f in ModelMeta.__dataclass_fields__}
    return ModelMeta(**{k: v for k, v in header.items() if k in known})


def read_container(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The verified header and weights of a model file of any kind (magic,
    format, the whole-file SHA-256, the payload's length and SHA-256); every
    failure names the file and the problem."""
    where = str(path)
    if not path.is_file():
        raise ArtifactError(f"model file {where!r} does not exist")
    blob = path.read_bytes()
    if not blob.startswith(MAGIC):
        raise ArtifactError(f"{where!r} is not a fedpath model file (bad magic bytes)")
    start = len(MAGIC) + 8
    if len(blob) < start:
        raise ArtifactError(f"model file {where!r} is truncated (no header)")
    (n_head,) = struct.unpack("<Q", blob[len(MAGIC) : start])
    try:
        header = json.loads(blob[start : start + n_head])
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ArtifactError(
            f"model file {where!r} is truncated or corrupted (unreadable header)"
        ) from None
    fmt = header.get("format")
    if fmt not in (1, FORMAT):
        raise ArtifactError(
            f"model file {where!r} has format {fmt!r} (written by fedpath "
            f"{header.get('fedpath_version')}); this fedpath {__version__} reads "
            f"formats 1 and {FORMAT}"
        )
    payload = blob[start + n_head :]
    if fmt == FORMAT:  # the trailer covers magic, header and payload
        payload, trailer = payload[:-32], payload[-32:]
        if hashlib.sha256(blob[:-32]).digest() != trailer:
            raise ArtifactError(
                f"model file {where!r} is truncated or altered (the file's "
                "SHA-256 does not match; header and weights are both covered)"
            )
    else:
        log.warning(
            "model file %s has format 1: its checksum does not cover the header "
            "(class names, threshold); re-export it with this fedpath",
            where,
        )
    if len(payload) != header.get("payload_bytes"):
        raise ArtifactError(
            f"model file {where!r} is truncated: {len(payload)} of "
            f"{header.get('payload_bytes')} payload bytes"
        )
    if hashlib.sha256(payload).hexdigest() != header.get("payload_sha256"):
        raise ArtifactError(f"model file {where!r} is corrupted (checksum mismatch)")
    try:
        weights = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as err:
        raise ArtifactError(
            f"model file {where!r}: cannot load weights: {err}"
        ) from None
    if not isinstance(header, dict):
        raise ArtifactError(f"model file {where!r}: the header is not a JSON object")
    return header, weights


class LoadedModel:
    """A model file ready for inference: ``predict_proba`` on tensors or PIL images.

    >>> model = load_model("runs/demo/fedstain/hospital_3/seed0/model.fpm")
    >>> probs = model.predict_proba([Image.open("patch.png")])   # (1, C) numpy
    >>> model.class_names[probs.argmax(1)[0]]
    """

    def __init__(
        self,
        meta: ModelMeta,
        weights: dict[str, torch.Tensor],
        path: Path | None = None,
    ) -> None:
        self.meta = meta
        self.path = path
        if meta.temperature is not None and not meta.temperature > 0:
            raise ArtifactError(
                f"model file {str(path)!r}: temperature must be > 0, got "
                f"{meta.temperature}"
            )
        if meta.tta not in ("none", "dihedral"):
            raise ArtifactError(
                f"model file {str(path)!r}: tta must be 'none' or 'dihedral', got "
                f"{meta.tta!r} (a newer fedpath wrote it?)"
            )
        if meta.threshold is not None and meta.num_classes != 2:
            raise ArtifactError(
                f"model file {str(path)!r}: a threshold needs two classes, the "
                f"model has {meta.num_classes}"
            )
        cfg = ModelConfig(backbone=meta.backbone, params=meta.backbone_params)
        try:
            self.model = build_model(cfg, meta.num_classes)
            self.model.load_state_dict(weights)
        except Exception as err:
            raise ArtifactError(
                f"model file {str(path)!r} does not fit backbone {meta.backbone!r}: "
                f"{err}"
            ) from None
        self.model.eval()

    @property
    def class_names(self) -> list[str]:
        return list(self.meta.class_names)

    @property
    def image_size(self) -> int:
        return self.meta.image_size

    def to_tensor(self, images: Any) -> torch.Tensor:
        """Images -> float (B, 3, S, S) in [0, 1], resized like training did.

        Accepts a uint8 or float tensor (B, 3, H, W) (float in [0, 1]), or a list of
        PIL images / HxWx3 uint8 arrays.
        """
        from PIL import Image

        if isinstance(images, torch.Tensor):
            x = images
            if x.ndim == 3:
                x = x.unsqueeze(0)
            if x.ndim != 4 or x.shape[1] != 3:
                raise ValueError(f"expected images (B, 3, H, W), got {tuple(x.shape)}")
            x = x.float().div(255.0) if x.dtype == torch.uint8 else x.float()
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
        from fedpath.tasks.images import dihedral_views

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

    def calibrate(self, probs: np.ndarray) -> np.ndarray:
        """The model's raw softmax ``probs`` scaled by its temperature
        (:func:`fedpath.evaluation.calibration.apply_temperature`; unchanged
        without one)."""
        if self.meta.temperature is None:
            return probs
        from fedpath.evaluation.calibration import apply_temperature

        return apply_temperature(probs, self.meta.temperature)

    def decide(self, probs: np.ndarray) -> np.ndarray:
        """Class indices for (calibrated) ``probs``: the operating point
        ``probs[:, 1] >= threshold`` when the file holds one, else the argmax."""
        if self.meta.threshold is None:
            return np.asarray(np.argmax(probs, axis=1), dtype=np.int64)
        return (probs[:, 1] >= self.meta.threshold).astype(np.int64)

    def predict(self, images: Any) -> list[str]:
        """Predicted class names (:meth:`decide`)."""
        probs = self.predict_proba(images)
        return [self.class_names[i] for i in self.decide(probs)]


def load_model(path: str | Path) -> LoadedModel:
    """Load and verify a model file written by a fedpath run (``model.fpm``).

    A MIL model file (``kind: mil``) is refused, naming :func:`load_mil_model`."""
    p = Path(path)
    meta, weights = read_model_file(p)
    return LoadedModel(meta, weights, p)


def load_mil_model(path: str | Path) -> LoadedMILModel:
    """Load and verify a MIL model file (``models/<client>.fpm`` of a run with
    ``evaluation.protocol: local`` on slide bags): its ``predict_proba`` takes a
    list of bags (:class:`fedpath.mil.export.LoadedMILModel`)."""
    from fedpath.mil.export import load_mil_model as load

    return load(path)


def load_any(path: str | Path) -> LoadedModel | LoadedMILModel:
    """The model of any fedpath model file: an image model
    (:class:`LoadedModel`) or a MIL model (``kind: mil``), by its header."""
    from fedpath.mil.export import LoadedMILModel, MILModelMeta

    p = Path(path)
    header, weights = read_container(p)
    if model_kind(header) == "mil":
        return LoadedMILModel(MILModelMeta.from_header(header, p), weights, p)
    return LoadedModel(_image_meta(header, p), weights, p)
