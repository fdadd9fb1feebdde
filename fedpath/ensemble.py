"""Ensembles of image models as one model file.

Members are model files of one recipe trained with different seeds, snapshots
or leave-one-out folds (``fedpath ensemble MODEL.fpm ... --out ENSEMBLE.fpm``).
The ensemble's file is the same container (:mod:`fedpath.model_file`) with
``kind: "ensemble"``: every member's weights under ``members.<i>.`` and every
member's own header under ``members`` (:class:`EnsembleMeta`), so each member
is rebuilt and applied exactly as its own file would be (its temperature, its
test-time augmentation). The ensemble's probability of an image is the mean of
its members' probabilities; ``fedpath evaluate``, ``predict`` and ``adapt-bn``
use an ensemble file like any image model file.

Members must agree on what an input is: the class names and their order, the
input size, resizing and centre zoom, and the colour normalization; a
disagreement is an error naming the member, the field and both values. The
members' operating points are not carried over (thresholds of different models
do not average); the ensemble gets its own with ``--threshold`` (two classes).

Cost at prediction: one forward pass per member and per test-time view, so an
ensemble of N members costs N times one member (``benchmarks/bench_ensemble.py``
measures it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from fedpath.artifact import LoadedModel, ModelMeta, read_model_file, save_model
from fedpath.config import ModelConfig
from fedpath.errors import ArtifactError
from fedpath.model_file import LoadedFile, header_fields
from fedpath.models.backbones import build_model
from fedpath.models.pretrained import sha256_file
from fedpath.models.tta import dihedral_views

#: what the members of an ensemble must share (field, what it is, in errors)
SHARED = (
    ("class_names", "class names (and their order)"),
    ("image_size", "input size"),
    ("resize", "resizing"),
    ("zoom", "centre zoom (data.params.zoom)"),
    ("mean", "colour normalization (mean)"),
    ("std", "colour normalization (std)"),
)
#: probabilities are clipped here before a log (as in fedpath.evaluation.calibration)
TINY = float(torch.finfo(torch.float32).tiny)


@dataclass
class EnsembleMeta(ModelMeta):
    """An ensemble's header: the shared input recipe (class names, size,
    normalization) in :class:`ModelMeta`'s fields, ``backbone: "ensemble"``, and
    each member's own header in ``members``."""

    kind: str = "ensemble"
    members: list[dict[str, Any]] = field(default_factory=list)


class EnsembleNet(nn.Module):
    """The members side by side; ``forward`` gives the log of the mean of the
    members' probabilities, each member's as its own file computes them (mean
    softmax over its test-time views, then its temperature), so a softmax of the
    output is the ensemble's probability."""

    def __init__(self, members: Sequence[nn.Module], metas: Sequence[ModelMeta]):
        super().__init__()
        self.members = nn.ModuleList(members)
        self.temperatures = [m.temperature for m in metas]
        self.tta = [m.tta for m in metas]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = []
        for net, t, tta in zip(self.members, self.temperatures, self.tta, strict=True):
            views = dihedral_views(x) if tta == "dihedral" else [x]
            p = torch.stack([torch.softmax(net(v), 1) for v in views]).mean(0)
            if t is not None and t != 1.0:
                p = torch.softmax(torch.log(p.clamp_min(TINY)) / t, 1)
            probs.append(p)
        return torch.log(torch.stack(probs).mean(0).clamp_min(TINY))


def _member_net(meta: ModelMeta) -> nn.Module:
    config = ModelConfig(backbone=meta.backbone, params=meta.backbone_params)
    return build_model(config, meta.num_classes)


class LoadedEnsemble(LoadedModel):
    """An ensemble file ready for inference: :class:`LoadedModel`'s interface,
    its ``model`` the :class:`EnsembleNet` of the members."""

    kind: ClassVar[str] = "ensemble"

    def __init__(
        self,
        meta: EnsembleMeta,
        weights: dict[str, torch.Tensor],
        path: Path | None = None,
    ) -> None:
        LoadedFile.__init__(self, meta, path)
        where = str(path)
        if len(meta.members) < 2 or not all(isinstance(m, dict) for m in meta.members):
            raise ArtifactError(
                f"model file {where!r}: header field 'members' must list two or "
                "more member headers"
            )
        self.member_metas = [
            header_fields(ModelMeta, m, f"{where}, member {i + 1}")
            for i, m in enumerate(meta.members)
        ]
        metas = self.member_metas
        self.model = self._fit(
            lambda: EnsembleNet([_member_net(m) for m in metas], metas),
            weights,
            f"an ensemble of {len(metas)} members "
            f"({', '.join(m.backbone for m in metas)})",
        )

    @classmethod
    def from_container(
        cls, header: Mapping[str, Any], weights: dict[str, torch.Tensor], path: Path
    ) -> LoadedEnsemble:
        """The ensemble of a verified header and its weights."""
        return cls(header_fields(EnsembleMeta, header, str(path)), weights, path)


def check_members(metas: Sequence[ModelMeta], paths: Sequence[Path]) -> None:
    """Refuse members that disagree on what an input is (:data:`SHARED`),
    naming the member, the field and both values."""
    first = metas[0]
    for i, meta in enumerate(metas[1:], start=2):
        for name, what in SHARED:
            mine, theirs = getattr(meta, name), getattr(first, name)
            if mine != theirs:
                raise ArtifactError(
                    f"ensemble member {i} ({str(paths[i - 1])!r}) has {what} "
                    f"{name}={mine!r}, member 1 ({str(paths[0])!r}) has "
                    f"{theirs!r}; an ensemble's members must share {what}"
                )


def _common(values: Sequence[Any], default: Any) -> Any:
    """The members' common value, or ``default`` when they differ."""
    return values[0] if all(v == values[0] for v in values) else default


def make_ensemble(
    paths: Sequence[Path], threshold: float | None = None
) -> tuple[EnsembleMeta, EnsembleNet]:
    """The header and network of the ensemble of the image model files
    ``paths`` (two or more, :func:`check_members`); ``threshold``: the
    ensemble's operating point on its positive (second) class."""
    if len(paths) < 2:
        raise ArtifactError(
            f"an ensemble needs two or more member model files, got {len(paths)}"
        )
    metas: list[ModelMeta] = []
    nets: list[nn.Module] = []
    members: list[dict[str, Any]] = []
    for path in paths:
        meta, weights = read_model_file(path)  # an image model (not MIL, ensemble)
        nets.append(LoadedModel(meta, weights, path).model)
        metas.append(meta)
        sha = sha256_file(Path(path))
        members.append({**asdict(meta), "file_sha256": sha, "file": Path(path).name})
    check_members(metas, paths)
    first = metas[0]
    if threshold is not None and first.num_classes != 2:
        raise ArtifactError(
            f"--threshold: an operating point needs two classes, the members have "
            f"{first.num_classes} ({', '.join(first.class_names)})"
        )
    trained: list[str] = sorted({d for m in metas for d in m.trained_on})
    meta = EnsembleMeta(
        backbone="ensemble",
        backbone_params={},
        class_names=list(first.class_names),
        image_size=first.image_size,
        mean=list(first.mean),
        std=list(first.std),
        resize=first.resize,
        zoom=first.zoom,
        method="ensemble of " + ", ".join(sorted({m.method or "?" for m in metas})),
        trained_on=trained,
        held_out=_common([m.held_out for m in metas], ""),
        data=_common([m.data for m in metas], first.data),
        expected=_common([m.expected for m in metas], {}),
        input_size=_common([m.input_size for m in metas], None),
        min_image_size=max((m.min_image_size or 0 for m in metas), default=0) or None,
        threshold=threshold,
        members=members,
        bn_fixed=[f"members.{i}.{n}" for i, m in enumerate(metas) for n in m.bn_fixed],
    )
    return meta, EnsembleNet(nets, metas)


def save_ensemble(
    out: Path, paths: Sequence[Path], threshold: float | None = None
) -> EnsembleMeta:
    """Write the ensemble of ``paths`` to ``out`` (:func:`make_ensemble`)."""
    if any(Path(out).resolve() == Path(p).resolve() for p in paths):
        raise ArtifactError(
            f"--out {str(out)!r} is one of the members; write the ensemble to a "
            "new file"
        )
    meta, net = make_ensemble(paths, threshold)
    save_model(out, net, meta)
    return meta
