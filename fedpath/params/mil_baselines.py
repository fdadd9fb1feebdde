"""Params of the baselines of FedHD's main table (FedHE, DESA, HistoFS, FedDGM).

Each is re-exported by its algorithm's module (``fedpath.algorithms.fedhe`` and so
on). Defaults are the reference code's where it has one (see each algorithm's
docstring and ``docs/fedhd.md``, "Baselines of the paper's main table").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from fedpath.params.mil_train import MILTrainParams, SpacesChoice, SpacesParams
from fedpath.schema import Ge, Gt, Probability, Range, require


@dataclass(frozen=True)
class FedHEParams(MILTrainParams):
    """``ld_proto``: weight of the MSE between a bag's logits and the global mean
    logits of its class (FedWSIDD repository's FedHE: 0.1)."""

    ld_proto: Annotated[float, Ge(0)] = 0.1


@dataclass(frozen=True)
class DESAParams(SpacesParams):
    """DESA (FedWSIDD repository's FedDESA): anchors, distillation, regulariser.

    Anchors: ``anchors_per_class`` synthetic slides per class of ``tokens``
    embeddings, mean-matched for ``iters`` Adam steps at ``distill_lr`` (FedWSIDD:
    ipc 10, nps 100, 1000 iterations), kept ``min_token_distance`` x the median
    patch gap away from every real patch (FedHD's guard). Loss weights:
    ``kd_weight`` x L_KD + ``reg_weight`` x L_REG (1, 1); L_KD = ``kd_ce`` x CE +
    (1 - ``kd_ce``) x T^2 x KL with T = ``temperature`` (0.1, 20); L_REG: SupCon at
    ``reg_temperature`` (0.07) over the training bag and one random anchor of
    every class (``reg_anchors: per_class``), or one random anchor of any class
    (``one``: the reference's two-sample batch, whose SupCon is identically 0).
    ``spaces: adapt`` (:class:`SpacesParams`): clients of other extractors; the
    anchors are mixed within each space and every client meets the foreign ones
    through an input adapter per space.
    """

    anchors_per_class: Annotated[int, Ge(1)] = 10
    tokens: Annotated[int, Ge(2)] = 100
    iters: Annotated[int, Ge(0)] = 1000
    distill_lr: Annotated[float, Gt(0)] = 0.05
    temperature: Annotated[float, Gt(0)] = 20.0
    kd_ce: Annotated[float, Probability] = 0.1
    kd_weight: Annotated[float, Ge(0)] = 1.0
    reg_weight: Annotated[float, Ge(0)] = 1.0
    reg_temperature: Annotated[float, Gt(0)] = 0.07
    reg_anchors: Literal["per_class", "one"] = "per_class"
    min_token_distance: Annotated[float, Ge(0)] = 0.5


@dataclass(frozen=True)
class HistoFSParams(SpacesChoice):
    """HistoFS (Raswa et al., CVPR 2025): pseudo bag styles and authenticity.

    ``num_styles``: K pseudo styles per bag (k-means, W2 distance; reference 5)
    after at most ``kmeans_iters`` Lloyd steps; ``authenticity``: lambda of
    a = 1 - lambda cos(A_orig, A_aug) (0.4); ``aug_p``: probability that a bag is
    also seen with a received style; ``aug_weight``, ``consistency_weight``: weights
    of the augmented bag's cross-entropy and of the a-weighted attention
    consistency (this implementation's choice: the reference's loss is
    unreleased). Weights are averaged (FedAvg), so with ``spaces: same`` every
    client trains ``model.backbone`` in the dataset's space: ``models`` and
    ``features`` must stay empty. ``spaces: adapt``: per-client architectures
    and extractors, weights averaged within each group of one architecture in
    one space, foreign styles mapped into the receiver's space (histofs.py).
    """

    num_styles: Annotated[int, Ge(1)] = 5
    kmeans_iters: Annotated[int, Ge(1)] = 50
    authenticity: Annotated[float, Range(0.0, 1.0)] = 0.4
    aug_p: Annotated[float, Probability] = 1.0
    aug_weight: Annotated[float, Ge(0)] = 1.0
    consistency_weight: Annotated[float, Ge(0)] = 1.0
    bn_buffers: Literal["average", "pooled"] = "average"

    def validate(self) -> None:
        super().validate()
        if self.adapt:
            return
        require(
            not self.models,
            "models",
            "no per-client architectures: HistoFS averages the MIL weights "
            "(FedAvg), which needs one architecture for every client (set "
            "model.backbone, or spaces: adapt to average within groups of one "
            "architecture)",
            self.models,
        )
        require(
            not self.features,
            "features",
            "no per-client feature extractors: HistoFS averages the MIL weights, "
            "which needs one embedding space for every client (or spaces: adapt "
            "to average within groups of one space)",
            sorted(self.features),
        )


@dataclass(frozen=True)
class FedDGMParams(SpacesParams):
    """FedDGM-approx (the original is unidentified): per-class generative models.

    Each client fits one ``components``-component Gaussian mixture
    (``covariance``) to the pooled patch embeddings of each of its classes (a
    seeded subsample of ``max_patches``) and uploads ``slides_per_class``
    synthetic slides per class (0: as many as it has real slides of that class)
    of ``tokens`` embeddings sampled from it, kept ``min_token_distance`` x the
    median patch gap from every real patch. Receivers train on real slides with
    cross-entropy and on the others' synthetic slides with ``synthetic_weight`` x
    cross-entropy. ``spaces: adapt`` (:class:`SpacesParams`): clients of other
    extractors, each receiver with an input adapter per foreign space.
    """

    components: Annotated[int, Ge(1)] = 16
    covariance: Literal["full", "diag"] = "full"
    tokens: Annotated[int, Ge(2)] = 1000
    slides_per_class: Annotated[int, Ge(0)] = 0
    max_patches: Annotated[int, Ge(1)] | None = 50_000
    synthetic_weight: Annotated[float, Ge(0)] = 1.0
    min_token_distance: Annotated[float, Ge(0)] = 0.5
