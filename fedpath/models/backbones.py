"""Backbones split into encoder h and classifier g (FedStain: f = g o h).

Every model is a :class:`FedModel`: it takes RGB images in [0, 1], normalizes them
itself (so an exported model carries its own colour normalization), runs the
encoder's stem and stages, pools to a feature vector ``z = h(x)`` and classifies
``g(z)``. A ``feature_hook(stage_index, feature_map)`` can rewrite intermediate maps
(feature-level MixStyle), and :meth:`FedModel.feature_maps` returns them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import torch
from torch import nn

from fedpath.config import ConfigError, ModelConfig, resolve_params
from fedpath.params.models import (  # noqa: F401  (Norm: its old home)
    Norm,
    ResNetParams,
    SmallCNNParams,
)
from fedpath.registry import BACKBONES

FeatureHook = Callable[[int, torch.Tensor], torch.Tensor]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class Encoder(nn.Module):
    """h: stem, then stages (each a module producing a feature map), then pooling."""

    def __init__(
        self, stem: nn.Module, stages: Sequence[nn.Module], out_dim: int
    ) -> None:
        super().__init__()
        self.stem = stem
        self.stages = nn.ModuleList(stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.out_dim = out_dim

    def forward(
        self,
        x: torch.Tensor,
        hook: FeatureHook | None = None,
        maps: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        x = self.stem(x)
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if hook is not None:
                x = hook(i, x)
            if maps is not None:
                maps.append(x)
        return torch.flatten(self.pool(x), 1)


class FedModel(nn.Module):
    """Normalization + encoder h + linear classifier g."""

    def __init__(
        self,
        encoder: Encoder,
        num_classes: int,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.classifier = nn.Linear(encoder.out_dim, num_classes)
        self.mean: torch.Tensor
        self.std: torch.Tensor
        self.register_buffer(
            "mean", torch.tensor(mean).view(1, 3, 1, 1), persistent=False
        )
        self.register_buffer(
            "std", torch.tensor(std).view(1, 3, 1, 1), persistent=False
        )
        self.num_classes = num_classes
        #: run the encoder under autocast to this dtype (``runtime.precision:
        #: bf16``); None: float32. Not saved: a loaded model runs in float32.
        self.autocast: torch.dtype | None = None

    @property
    def feature_dim(self) -> int:
        return self.encoder.out_dim

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        # channels-last: oneDNN's NHWC kernels are 2-7x faster on CPU (measured:
        # small CNN, batch 32, 48 px, 2 threads: 16 vs 70 ms per training step)
        return ((x - self.mean) / self.std).contiguous(
            memory_format=torch.channels_last
        )

    def encode(self, x: torch.Tensor, hook: FeatureHook | None = None) -> torch.Tensor:
        """z = h(x) for images x in [0, 1] (float32, also under :attr:`autocast`)."""
        if self.autocast is not None:
            hook = _float32(hook)
        with autocast_scope(x, self.autocast):
            z = self.encoder(self.normalize(x), hook)
        return z.float()

    def forward(self, x: torch.Tensor, hook: FeatureHook | None = None) -> torch.Tensor:
        return self.classifier(self.encode(x, hook))

    def trunk(self, x: torch.Tensor, stop: int) -> torch.Tensor:
        """The feature map after the stem and ``encoder.stages[:stop]`` (float32):
        what enters stage ``stop`` (the frozen part of ``train.trainable:
        last_stages``)."""
        enc = self.encoder
        with autocast_scope(x, self.autocast):
            m = enc.stem(self.normalize(x))
            for stage in list(enc.stages)[:stop]:
                m = stage(m)
        return m.float()

    def feature_maps(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Output of every encoder stage (for feature-level statistics; float32)."""
        maps: list[torch.Tensor] = []
        with autocast_scope(x, self.autocast):
            self.encoder(self.normalize(x), None, maps)
        return [m.float() for m in maps]


def autocast_scope(
    x: torch.Tensor, dtype: torch.dtype | None
) -> contextlib.AbstractContextManager[object]:
    """Autocast to ``dtype`` on ``x``'s device (``runtime.precision``); nothing
    when ``dtype`` is None (float32)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(x.device.type, dtype=dtype)


def _float32(hook: FeatureHook | None) -> FeatureHook | None:
    """``hook`` run outside autocast on float32 maps: feature statistics (means,
    variances, higher moments) are not computed in bf16."""
    if hook is None:
        return None

    def run(stage: int, fmap: torch.Tensor) -> torch.Tensor:
        with torch.autocast(fmap.device.type, enabled=False):
            return hook(stage, fmap.float())

    return run


# --------------------------------------------------------------------------- registry


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(min(8, channels), channels)
    if kind == "instance":
        return nn.InstanceNorm2d(channels, affine=True)
    return nn.Identity()


@BACKBONES.register("small_cnn", params=SmallCNNParams)
def small_cnn(params: SmallCNNParams, num_classes: int) -> FedModel:
    """Small CNN for CPU work: 4 conv blocks (16-32-64-128), global average pool."""
    widths = params.widths or [16, 32, 64, 128]
    stages: list[nn.Module] = []
    c_in = 3
    for w in widths:
        stages.append(
            nn.Sequential(
                nn.Conv2d(c_in, w, 3, padding=1, bias=params.norm == "none"),
                _norm(params.norm, w),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            )
        )
        c_in = w
    return FedModel(Encoder(nn.Identity(), stages, c_in), num_classes)


def _resnet(arch: str, params: ResNetParams, num_classes: int) -> FedModel:
    import torchvision  # lazy: importing it costs ~2 s (torch._dynamo), per process

    norm_layer: Callable[[int], nn.Module] | None = None
    if params.norm == "group":

        def norm_layer(c: int) -> nn.Module:
            return nn.GroupNorm(32, c)

    net = getattr(torchvision.models, arch)(weights=None, norm_layer=norm_layer)
    stem = nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool)
    stages = [net.layer1, net.layer2, net.layer3, net.layer4]
    return FedModel(Encoder(stem, stages, net.fc.in_features), num_classes)


#: torchvision ResNets: registry (and torchvision) name -> ``fedpath list`` line
RESNETS = {
    "resnet18": "torchvision ResNet-18 (512-d features).",
    "resnet50": "torchvision ResNet-50 (2048-d features).",
}
for _arch, _doc in RESNETS.items():
    BACKBONES.register(_arch, params=ResNetParams, doc=_doc)(partial(_resnet, _arch))


def build_model(cfg: ModelConfig, num_classes: int) -> FedModel:
    """Build the configured backbone; load ``cfg.weights`` (a local file) if given."""
    schema = BACKBONES.params(cfg.backbone)
    params = resolve_params(schema, cfg.params, "model.params") if schema else None
    model = BACKBONES.get(cfg.backbone)(params, num_classes)
    if cfg.weights:
        load_pretrained(model, Path(cfg.weights))
    return model.to(memory_format=torch.channels_last)


_TORCHVISION_RENAMES = (
    ("conv1.", "encoder.stem.0."),
    ("bn1.", "encoder.stem.1."),
    ("layer1.", "encoder.stages.0."),
    ("layer2.", "encoder.stages.1."),
    ("layer3.", "encoder.stages.2."),
    ("layer4.", "encoder.stages.3."),
)


def load_pretrained(model: FedModel, path: Path) -> None:
    """Load encoder weights from a local file (a fedpath or torchvision state_dict).

    The classifier is never loaded (the number of classes differs); every encoder
    tensor must be present with the right shape, or the error names what is wrong.
    """
    if not path.is_file():
        raise ConfigError(f"model.weights: file {str(path)!r} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # corrupt pickle, wrong format, ...
        raise ConfigError(f"model.weights: cannot read {str(path)!r}: {err}") from None
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise ConfigError(f"model.weights: {str(path)!r} does not hold a state_dict")
    renamed: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        for old, new in _TORCHVISION_RENAMES:
            if key.startswith(old):
                key = new + key[len(old) :]
                break
        if key.startswith("encoder."):
            renamed[key] = value
    own = {k: v for k, v in model.state_dict().items() if k.startswith("encoder.")}
    missing = sorted(set(own) - set(renamed))
    bad = sorted(k for k in own if k in renamed and renamed[k].shape != own[k].shape)
    if missing or bad:
        raise ConfigError(
            f"model.weights: {str(path)!r} does not fit backbone: "
            f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"wrong shape {bad[:5]}"
        )
    model.load_state_dict({**model.state_dict(), **{k: renamed[k] for k in own}})


NORM_TYPES = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.GroupNorm,
    nn.LayerNorm,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
)


def keys_of_modules(model: nn.Module, types: tuple[type[nn.Module], ...]) -> set[str]:
    """state_dict keys (parameters and buffers) owned by modules of the given types.

    Selecting by module type, not by a substring of the name, catches torchvision's
    ``downsample.1`` BatchNorms that a ``"bn" in name`` filter misses (FedBN's bug).
    """
    keys: set[str] = set()
    for mod_name, module in model.named_modules():
        if isinstance(module, types):
            prefix = f"{mod_name}." if mod_name else ""
            keys.update(prefix + k for k, _ in module.named_parameters(recurse=False))
            keys.update(
                prefix + k
                for k, _ in module.named_buffers(recurse=False)
                if k in module.state_dict()
            )
    return keys
