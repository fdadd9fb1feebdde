"""The one loader of model files of every kind (by the header's ``kind``).

:func:`load_model` gives the loaded model of any fedpath model file: an image
model (:mod:`fedpath.artifact`), a MIL model of slide bags
(:mod:`fedpath.mil.export`) or an ensemble of image models
(:mod:`fedpath.ensemble`); :func:`load_mil_model` asks for a MIL model;
:func:`from_container` builds any of them from a container already read and
verified.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fedpath.artifact import LoadedModel
from fedpath.ensemble import LoadedEnsemble
from fedpath.errors import ArtifactError
from fedpath.mil.export import LoadedMILModel, MILModelMeta
from fedpath.model_file import header_fields, read_container
from fedpath.version import __version__

#: the loaded model of each kind of file (the header's ``kind``, :func:`model_kind`)
KINDS: dict[str, type[LoadedModel] | type[LoadedMILModel]] = {
    LoadedModel.kind: LoadedModel,
    LoadedMILModel.kind: LoadedMILModel,
    LoadedEnsemble.kind: LoadedEnsemble,
}


def load_model(path: str | Path) -> LoadedModel | LoadedMILModel:
    """Load and verify a model file written by fedpath: an image model
    (``model.fpm``, :class:`~fedpath.artifact.LoadedModel`), a MIL model of slide
    bags (``models/<client>.fpm``, ``kind: mil``,
    :class:`~fedpath.mil.export.LoadedMILModel`) or an ensemble of image models
    (``kind: ensemble``, :class:`~fedpath.ensemble.LoadedEnsemble`, a
    :class:`~fedpath.artifact.LoadedModel` too), by its header.

    All give ``class_names``, ``predict_proba``, ``calibrate``, ``decide`` and
    ``predict`` (:class:`fedpath.model_file.LoadedFile`); an image model's
    inputs are images, a MIL model's a list of bags."""
    p = Path(path)
    header, weights = read_container(p)
    return from_container(header, weights, p)


def from_container(
    header: dict[str, Any], weights: dict[str, torch.Tensor], path: Path
) -> LoadedModel | LoadedMILModel:
    """The loaded model of a verified container (``read_container(path)``), by
    its header's ``kind``, the kind's header fields checked."""
    kind = header.get("kind") or "image"
    if not isinstance(kind, str) or kind not in KINDS:
        raise ArtifactError(
            f"model file {str(path)!r} holds a model of kind {kind!r}; this fedpath "
            f"{__version__} reads {', '.join(KINDS)}"
        )
    if kind == LoadedMILModel.kind:  # types checked here; its own reader builds it
        header_fields(MILModelMeta, header, str(path))
    return KINDS[kind].from_container(header, weights, path)


def load_mil_model(path: str | Path) -> LoadedMILModel:
    """:func:`load_model` of a MIL model file (``models/<client>.fpm`` of a run
    with ``evaluation.protocol: local`` on slide bags): its ``predict_proba``
    takes a list of bags. An image model file is refused, naming
    :func:`load_model`."""
    model = load_model(path)
    if not isinstance(model, LoadedMILModel):
        raise ArtifactError(
            f"model file {str(path)!r} holds an {model.kind} model, not a MIL model "
            "of slide bags; load it with fedpath.load_model"
        )
    return model
