"""The model file: one container and one loaded-model interface for every kind.

A hospital that never took part in the federation gets one file and fedpath. The
file holds the weights and the recipe to rebuild and apply them; what the recipe
says depends on the kind of model, which the task that trained it decides: an
image classifier (:class:`fedpath.artifact.ModelMeta`, a header without ``kind``,
as every file before MIL export) or a MIL model of slide bags
(:class:`fedpath.mil.export.MILModelMeta`, ``kind: "mil"``).

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

:class:`LoadedFile` is what every kind of loaded model shares: its metadata and
file, its classes, the temperature that scales its probabilities and the
operating point that turns them into decisions. :func:`fedpath.loading.load_model`
returns the right kind for a file's header.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np
import torch
from torch import nn

from fedpath.errors import ArtifactError
from fedpath.schema import ConfigError, from_mapping
from fedpath.utils.io import atomic_write_bytes
from fedpath.version import __version__

log = logging.getLogger("fedpath")

MAGIC = b"FEDPATH-MODEL\n"
#: 2: a SHA-256 of the whole file at its end (1: of the payload only)
FORMAT = 2
SUFFIX = ".fpm"

#: the metadata dataclass of one kind of model file (:func:`header_fields`)
HeadT = TypeVar("HeadT")


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


def _header(blob: bytes, where: str) -> tuple[dict[str, Any], int]:
    """The JSON header of a model file's bytes and where its payload starts."""
    if not blob.startswith(MAGIC):
        raise ArtifactError(f"{where!r} is not a fedpath model file (bad magic bytes)")
    start = len(MAGIC) + 8
    if len(blob) < start:
        raise ArtifactError(f"model file {where!r} is truncated (no header)")
    (n_head,) = struct.unpack("<Q", blob[len(MAGIC) : start])
    if start + n_head > len(blob):
        raise ArtifactError(
            f"model file {where!r} is truncated: its header says {n_head:,} bytes, "
            f"the file holds {len(blob) - start:,} after the magic"
        )
    try:
        header = json.loads(blob[start : start + n_head])
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise ArtifactError(
            f"model file {where!r} is truncated or corrupted (unreadable header)"
        ) from None
    # checked before any field is read: a list or a number has no fields
    if not isinstance(header, dict):
        raise ArtifactError(
            f"model file {where!r}: the header is a JSON {_json_type(header)}; "
            "expected a JSON object of fields (a damaged or foreign file)"
        )
    fmt = header.get("format")
    if fmt not in (1, FORMAT) or isinstance(fmt, bool):
        raise ArtifactError(
            f"model file {where!r} has format {fmt!r} (written by fedpath "
            f"{header.get('fedpath_version')}); this fedpath {__version__} reads "
            f"formats 1 and {FORMAT}"
        )
    return header, start + n_head


def _json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, for errors."""
    names = {list: "list", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _payload(blob: bytes, header: Mapping[str, Any], start: int, where: str) -> bytes:
    """The verified payload (the whole-file SHA-256 of format 2, the payload's
    length and SHA-256)."""
    payload = blob[start:]
    if header.get("format") == FORMAT:  # the trailer covers magic, header, payload
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
    return payload


def read_container(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The verified header and weights of a model file of any kind (magic,
    format, the whole-file SHA-256, the payload's length and SHA-256, finite
    weights); every failure names the file and the problem."""
    where = str(path)
    blob = _read_bytes(path, where)
    header, start = _header(blob, where)
    payload = _payload(blob, header, start, where)
    try:
        weights = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as err:
        # not torch's text: it is several lines, and it suggests loading the file
        # with code execution allowed, which fedpath never does
        raise ArtifactError(
            f"model file {where!r}: the weights are not a tensors-only PyTorch "
            f"file ({type(err).__name__}); fedpath loads weights only, never code"
        ) from None
    check_weights(weights, where)
    return header, weights


def _read_bytes(path: Path, where: str) -> bytes:
    """The file's bytes; a folder, a FIFO or an unreadable file is named as such
    (never opened: a FIFO would block)."""
    if path.is_dir():
        raise ArtifactError(f"model file {where!r} is a folder; expected a .fpm file")
    if not path.exists():
        raise ArtifactError(f"model file {where!r} does not exist")
    if not path.is_file():
        raise ArtifactError(f"model file {where!r} is not a regular file")
    try:
        return path.read_bytes()
    except OSError as err:
        raise ArtifactError(
            f"model file {where!r} cannot be read: {err.strerror}"
        ) from None


def check_weights(weights: Any, where: str) -> None:
    """Refuse weights that are not named tensors, or a tensor holding NaN or
    infinity: such a model's probabilities are ``nan`` for every input, so it
    is refused at load instead of scoring or predicting garbage."""
    if not isinstance(weights, dict) or not all(isinstance(k, str) for k in weights):
        raise ArtifactError(
            f"model file {where!r}: the weights are not a mapping of named tensors"
        )
    for name, tensor in weights.items():
        if not isinstance(tensor, torch.Tensor):
            continue  # e.g. an extra state; the network's load_state_dict judges
        if (tensor.is_floating_point() or tensor.is_complex()) and not bool(
            torch.isfinite(tensor).all()
        ):
            raise ArtifactError(
                f"model file {where!r}: tensor {name!r} holds non-finite values "
                "(NaN or infinity); the run that wrote it diverged: retrain it "
                "(a lower train.lr) or export an earlier round"
            )


def check_class_names(names: Any) -> bool:
    """Whether ``names`` is a non-empty list of unique, non-empty strings."""
    return (
        isinstance(names, list)
        and len(names) > 0
        and all(isinstance(n, str) and n.strip() for n in names)
        and len(set(names)) == len(names)
    )


#: how :func:`check_class_names` is worded in errors
CLASS_NAMES = "a non-empty list of unique, non-empty class names"


def header_fields(cls: type[HeadT], header: Mapping[str, Any], where: str) -> HeadT:
    """The metadata dataclass ``cls`` (of one kind of model file) built from a
    verified header's fields, each type-checked against ``cls``'s annotations
    and constraints (:func:`fedpath.schema.from_mapping`); fields ``cls`` does
    not know are ignored (a newer fedpath's). A missing field or one of the
    wrong type or value names the file, the field and what was expected."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for name, f in fields.items():
        required = (
            f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        )
        if required and name not in header:
            raise ArtifactError(
                f"model file {where!r}: the header has no {name!r} field (a "
                "damaged file, or one not written by fedpath)"
            )
    known = {k: v for k, v in header.items() if k in fields}
    try:
        return from_mapping(cls, known, "")
    except ConfigError as err:
        said = str(err).replace("config key ", "field ", 1)
        raise ArtifactError(f"model file {where!r}: header {said}") from None


class FileMeta(Protocol):
    """What every kind of model file says about its classes and decision rule."""

    class_names: list[str]
    temperature: float | None
    threshold: float | None
    data: dict[str, Any]

    @property
    def num_classes(self) -> int: ...


MetaT = TypeVar("MetaT", bound=FileMeta)
NetT = TypeVar("NetT", bound=nn.Module)


class LoadedFile(ABC, Generic[MetaT]):
    """A model file ready for inference, of any kind: its ``meta`` and ``path``,
    the probabilities of its inputs (:meth:`predict_proba`, by kind), the
    temperature that scales them (:meth:`calibrate`) and the decision rule
    (:meth:`decide`). ``kind`` is the header's; ``unit`` names one input."""

    #: the header's ``kind`` (:func:`model_kind`)
    kind: ClassVar[str]
    #: what one input is, in messages and reports (``images``, ``slides``)
    unit: ClassVar[str]

    def __init__(self, meta: MetaT, path: Path | None = None) -> None:
        self.meta = meta
        self.path = path
        if not check_class_names(meta.class_names):
            raise ArtifactError(
                f"model file {str(path)!r}: class_names must be {CLASS_NAMES}"
            )
        if meta.temperature is not None and not meta.temperature > 0:
            raise ArtifactError(
                f"model file {str(path)!r}: temperature must be > 0, got "
                f"{meta.temperature}"
            )
        if meta.threshold is not None and meta.num_classes != 2:
            raise ArtifactError(
                f"model file {str(path)!r}: a threshold needs two classes, the "
                f"model has {meta.num_classes}"
            )

    def _fit(
        self, build: Callable[[], NetT], weights: dict[str, Any], what: str
    ) -> NetT:
        """The network ``build`` makes, holding ``weights``, in eval mode; a
        mismatch names the file and ``what`` it should be."""
        try:
            net = build()
            net.load_state_dict(weights)
        except Exception as err:
            raise ArtifactError(
                f"model file {str(self.path)!r} does not fit {what}: {err}"
            ) from None
        return net.eval()

    @property
    def class_names(self) -> list[str]:
        return list(self.meta.class_names)

    @abstractmethod
    def predict_proba(self, inputs: Any) -> np.ndarray:
        """(n, C) class probabilities of ``inputs`` (images or bags, by kind)."""

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

    def predict(self, inputs: Any) -> list[str]:
        """Predicted class names (:meth:`decide`)."""
        return [self.class_names[i] for i in self.decide(self.predict_proba(inputs))]
