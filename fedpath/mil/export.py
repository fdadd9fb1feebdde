"""MIL models of slide bags as self-describing files, and using them elsewhere.

A run with ``evaluation.protocol: local`` on slide bags (FedHD and its MIL
baselines) ends with every client deploying its own MIL model; the runtime writes
each as ``models/<client>.fpm`` in the run directory
(:meth:`fedpath.tasks.bags.BagTask.export_client`). The file is the container of
``model.fpm`` (:mod:`fedpath.artifact`: magic, JSON header, ``torch.save`` weights
loaded ``weights_only``, a SHA-256 of the whole file) with ``kind: "mil"`` in the
header and :class:`MILModelMeta` as its metadata: the architecture and its full
parameters, the embedding space the model expects (feature dimension, the
extractor's name and, when the bag files record it, the encoder that made them),
class names and the run's provenance (config hash, method, client, seed, fedpath
version, data settings).

:func:`fedpath.load_model` gives a :class:`LoadedMILModel`, whose
:meth:`~LoadedMILModel.predict_proba` takes a list of bags (``(N, D)`` tensors or
arrays, or :class:`~fedpath.mil.bags.SlideBag`) and computes exactly what the
run's own evaluation did (:func:`fedpath.mil.predict.evaluate_mil`), so its
metrics on a client's test slides are the run's. A bag of another feature
dimension is an error naming it and the dimension the model expects.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from fedpath.config import DataConfig, resolve_params
from fedpath.errors import ArtifactError, DataError
from fedpath.mil.bags import SlideBag
from fedpath.mil.models import MILModel, build_mil_model
from fedpath.mil.predict import evaluate_mil
from fedpath.model_file import FORMAT, SUFFIX, LoadedFile, write_container
from fedpath.registry import MIL_MODELS
from fedpath.version import __version__

if TYPE_CHECKING:
    from fedpath.config import ExperimentConfig

log = logging.getLogger("fedpath")

#: the header's ``kind`` of a MIL model file
KIND = "mil"
#: what a bag file may be (CLAM's ``h5_files`` / ``pt_files``)
BAG_SUFFIXES: tuple[str, ...] = (".h5", ".pt")
#: encoder facts ``fedpath features`` writes on a features h5 (file attributes)
_FILE_ATTRS = ("backbone", "encoder_sha256", "weights_sha256", "input_size")
#: patch geometry the tiling wrote on its ``coords`` (copied into the features h5)
_COORD_ATTRS = ("patch_size", "patch_level", "target_patch_size", "magnification")
#: the encoder facts whose disagreement means another embedding space
_IDENTITY = ("backbone", "encoder_sha256", "weights_sha256")


@dataclass
class MILModelMeta:
    """What a MIL model file says about itself (the header of ``kind: mil``)."""

    architecture: str
    #: every parameter of the architecture (defaults filled in), so a later
    #: fedpath with other defaults rebuilds the same model
    architecture_params: dict[str, Any]
    #: the feature dimension D of the bags it takes
    in_dim: int
    class_names: list[str]
    #: the extractor's declared name (``BagStore.embedding_space``)
    embedding_space: str
    #: the encoder that made the training bags, as their files record it
    #: (``backbone``, ``encoder_sha256``, ``weights_sha256``, ``input_size``,
    #: ``patch_size``, ``patch_level``, ``target_patch_size``, ``magnification``,
    #: ``read_from``); {}: not recorded (synthetic bags, ``.pt`` files)
    encoder: dict[str, Any] = field(default_factory=dict)
    kind: str = KIND
    fedpath_version: str = __version__
    format: int = FORMAT
    config_hash: str = ""
    method: str = ""
    #: the client that deployed it and its domain (hospital)
    client: str = ""
    domain: str = ""
    #: every source domain of the federation it was trained in
    federation: list[str] = field(default_factory=list)
    seed: int | None = None
    round: int | None = None
    #: the run's data config (``name``, ``root``, ``params``): ``fedpath evaluate
    #: MODEL NAME:DOMAIN`` rebuilds the run's data from it
    data: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S"))
    #: none is fitted for MIL models yet (the image models' names, so both
    #: kinds evaluate alike): probabilities are the raw softmax, decisions argmax
    temperature: float | None = None
    threshold: float | None = None

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @classmethod
    def from_header(cls, header: Mapping[str, Any], path: Path) -> MILModelMeta:
        """The metadata of a verified header; a missing field names the file."""
        known = set(cls.__dataclass_fields__)
        try:
            return cls(**{k: v for k, v in header.items() if k in known})
        except TypeError as err:
            raise ArtifactError(
                f"model file {str(path)!r}: incomplete MIL model header ({err})"
            ) from None


def client_file(directory: Path, client_id: str) -> Path:
    """``directory/<client>.fpm``: ``/`` becomes ``__`` (``hospital_0/c0`` ->
    ``hospital_0__c0.fpm``), any other character outside ``[A-Za-z0-9._-]``
    ``_``."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", client_id.replace("/", "__"))
    return directory / f"{name.lstrip('.') or 'client'}{SUFFIX}"


def architecture_recipe(
    cfg: ExperimentConfig, chosen: str
) -> tuple[str, dict[str, Any]]:
    """The architecture name and full parameters of a client's model, as
    :func:`fedpath.algorithms.mil_common.own_model` builds it: ``chosen`` (the
    client's state scalar ``architecture``; ``""``: the configured
    ``model.backbone``) with ``algorithm.params.model_params[chosen]``, else
    ``model.params`` for the configured backbone, else the defaults."""
    backbone = cfg.model.backbone
    name = chosen or backbone
    per_arch = dict(cfg.algorithm.params.get("model_params") or {})
    if chosen and chosen in per_arch:
        given: Mapping[str, Any] = per_arch[chosen] or {}
    elif name == backbone:
        given = cfg.model.params
    else:
        given = {}
    schema = MIL_MODELS.params(name)
    if schema is None:
        return name, {}
    params: Any = resolve_params(schema, dict(given), f"mil model {name!r} params")
    return name, asdict(params)


def _plain(value: Any) -> Any:
    """An h5 attribute as JSON: bytes decoded, numpy scalars and arrays unboxed."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def bag_file_encoder(path: Path) -> dict[str, Any]:
    """The encoder facts a features ``.h5`` records (``fedpath features``: its
    file attributes, the tiling's patch geometry on ``coords``); {} for a ``.pt``
    or an h5 without them."""
    if path.suffix != ".h5":
        return {}
    import h5py

    out: dict[str, Any] = {}
    try:
        with h5py.File(path, "r") as fh:
            for key in _FILE_ATTRS:
                if key in fh.attrs:
                    out[key] = _plain(fh.attrs[key])
            if "coords" in fh:
                attrs = fh["coords"].attrs
                for key in _COORD_ATTRS:
                    if key in attrs:
                        out[key] = _plain(attrs[key])
    except OSError:
        return {}  # reading the bag itself reports the problem
    if out.get("magnification") in (0, 0.0):  # the tiling's "unknown"
        out.pop("magnification")
    return {k: v for k, v in out.items() if v not in ("", None)}


def dataset_encoder(data: DataConfig) -> dict[str, Any]:
    """The encoder of a run's bags when its files record one: ``clam_bags``'
    first ``h5_files/*.h5`` (:func:`bag_file_encoder`, with ``read_from``); {}
    for synthetic bags or ``.pt`` files only."""
    if data.name != "clam_bags" or not data.root:
        return {}
    files = sorted((Path(data.root) / "h5_files").glob("*.h5"))
    for f in files:
        found = bag_file_encoder(f)
        if found:
            return {**found, "read_from": f"h5_files/{f.name}"}
    return {}


def encoder_mismatch(
    expected: Mapping[str, Any], found: Mapping[str, Any]
) -> list[str]:
    """The encoder facts (backbone, encoder and weights SHA-256) both record and
    that differ, as ``key: model X, bags Y``; [] when none do."""
    return [
        f"{key}: model {expected[key]!r}, bags {found[key]!r}"
        for key in _IDENTITY
        if expected.get(key) and found.get(key) and expected[key] != found[key]
    ]


def export_client_model(
    path: Path,
    model: MILModel,
    cfg: ExperimentConfig,
    *,
    classes: Sequence[str],
    embedding_space: str,
    provenance: Mapping[str, Any],
    encoder: Mapping[str, Any] | None = None,
) -> Path:
    """Write a client's deployed ``model`` to ``path`` (``kind: mil``).

    ``provenance`` holds the :class:`MILModelMeta` fields of the run
    (``client``, ``domain``, ``config_hash``, ``method``, ``seed``, ``round``,
    ``data``, ``federation``) and ``architecture``: the client's state scalar
    (:func:`architecture_recipe`); ``encoder``: the encoder facts of the
    client's own bags (default: those of the run's data). The recipe is checked
    before writing: the model it builds must take exactly these weights."""
    name, params = architecture_recipe(cfg, str(provenance.get("architecture", "")))
    rebuilt = build_mil_model(name, model.in_dim, model.num_classes, params)
    try:
        rebuilt.load_state_dict(model.state_dict())
    except RuntimeError as err:
        raise ArtifactError(
            f"client {provenance.get('client')!r}: its model does not fit the "
            f"recorded architecture {name!r} ({err}); not exported"
        ) from None
    # ``architecture`` of ``provenance`` is the state's choice, not the recipe's
    known = set(MILModelMeta.__dataclass_fields__) - {"architecture"}
    meta = MILModelMeta(
        architecture=name,
        architecture_params=params,
        in_dim=model.in_dim,
        class_names=list(classes),
        embedding_space=embedding_space,
        encoder=dict(encoder) if encoder is not None else dataset_encoder(cfg.data),
        **{k: v for k, v in provenance.items() if k in known},
    )
    return write_container(path, asdict(meta), model)


class LoadedMILModel(LoadedFile[MILModelMeta]):
    """A MIL model file ready for inference: ``predict_proba`` on a list of bags.

    >>> model = load_model("runs/fedhd/none/seed0/models/hospital_0__c0.fpm")
    >>> probs = model.predict_proba([torch.load("pt_files/slide_1.pt")])  # (1, C)
    >>> model.class_names[probs.argmax(1)[0]]

    No temperature or operating point is fitted for MIL models yet: the
    probabilities are the softmax, the decisions the argmax.
    """

    kind: ClassVar[str] = KIND
    unit: ClassVar[str] = "slides"

    def __init__(
        self,
        meta: MILModelMeta,
        weights: dict[str, Tensor],
        path: Path | None = None,
    ) -> None:
        super().__init__(meta, path)
        if meta.kind != KIND:
            raise ArtifactError(f"model file {str(path)!r} is not a MIL model file")
        self.model = self._fit(
            lambda: build_mil_model(
                meta.architecture,
                int(meta.in_dim),
                meta.num_classes,
                meta.architecture_params,
            ),
            weights,
            f"MIL architecture {meta.architecture!r}",
        )

    @classmethod
    def from_container(
        cls, header: Mapping[str, Any], weights: dict[str, Tensor], path: Path
    ) -> LoadedMILModel:
        """The MIL model of a verified header (``kind: mil``) and its weights."""
        return cls(MILModelMeta.from_header(header, path), weights, path)

    @property
    def in_dim(self) -> int:
        return int(self.meta.in_dim)

    @property
    def embedding_space(self) -> str:
        return self.meta.embedding_space

    def check_dim(self, dim: int, where: str) -> None:
        """A DataError naming ``where`` unless ``dim`` is the model's D."""
        if dim != self.in_dim:
            raise DataError(
                f"{where}: bag has feature dimension {dim}, but the model "
                f"{str(self.path)!r} expects {self.in_dim} (embedding space "
                f"{self.embedding_space!r}{self._encoder_text()}); embed the "
                "slides with the model's encoder"
            )

    def _encoder_text(self) -> str:
        enc = self.meta.encoder
        if not enc.get("backbone"):
            return ""
        sha = enc.get("weights_sha256") or enc.get("encoder_sha256")
        return f", encoder {enc['backbone']}" + (f" sha256 {sha[:12]}" if sha else "")

    def as_bags(self, bags: Sequence[Any]) -> list[SlideBag]:
        """``bags`` (SlideBags, ``(N, D)`` tensors or arrays) as SlideBags, each
        checked against the model's feature dimension."""
        out: list[SlideBag] = []
        for i, bag in enumerate(bags):
            if isinstance(bag, SlideBag):
                self.check_dim(bag.dim, f"slide {bag.slide_id!r}")
                out.append(bag)
                continue
            x = torch.as_tensor(np.asarray(bag) if not isinstance(bag, Tensor) else bag)
            if x.ndim != 2 or x.shape[0] == 0:
                raise DataError(
                    f"bag {i}: expected a non-empty (N, D) array, got {tuple(x.shape)}"
                )
            self.check_dim(int(x.shape[1]), f"bag {i}")
            out.append(SlideBag(f"bag {i}", x.to(torch.float32), 0, ""))
        return out

    def predict_proba(self, bags: Sequence[Any]) -> np.ndarray:
        """(n, C) float64 class probabilities of ``bags``, one slide each: the
        softmax of the model's slide logits in eval mode, as the run's own
        evaluation computed them (:func:`fedpath.mil.predict.evaluate_mil`)."""
        probs, _ = evaluate_mil(self.model, self.as_bags(bags))
        return probs


def scan_bag_files(root: Path) -> list[Path]:
    """Every bag file (``.h5``, ``.pt``) at any depth under ``root``, sorted; of
    CLAM's pair ``h5_files/<id>.h5`` + ``pt_files/<id>.pt`` under one folder
    (``fedpath features --save-pt``) only the ``.h5``."""
    files = sorted(
        p for p in root.rglob("*") if p.is_file() and p.suffix in BAG_SUFFIXES
    )
    h5 = {
        (p.parent.parent, p.stem)
        for p in files
        if p.suffix == ".h5" and p.parent.name == "h5_files"
    }
    return [
        p
        for p in files
        if not (
            p.suffix == ".pt"
            and p.parent.name == "pt_files"
            and (p.parent.parent, p.stem) in h5
        )
    ]
