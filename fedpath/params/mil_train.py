"""The slide-bag (MIL) algorithms' training params (``algorithm.params``), without
PyTorch: which MIL model each client trains and in which embedding space
(FedAvg-MIL, FedProx-MIL, FedHD; the other baselines' are in
:mod:`.mil_baselines`). See :mod:`fedpath.params` for why they live here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fedpath.params.algorithms import AlgorithmParams
from fedpath.schema import Checked, Ge, Range, require


@dataclass(frozen=True)
class FeatureSetParams(Checked):
    """One client's own embedding space (``algorithm.params.features.<key>``).

    The client reads the slides of the dataset (same slide ids, labels, domains
    and split) as embedded by *its* feature extractor: ``root``, a folder in
    CLAM's layout (``h5_files/<slide_id>.h5`` or ``pt_files/<slide_id>.pt``;
    relative paths from the working directory, as ``data.root``), or
    ``project: d``, a fixed random linear map (seed ``seed``; ``nonlinear``:
    then ``tanh``) of the dataset's own bags to
    ``d`` dimensions, which stands in for another extractor of the same tissue
    on synthetic data. ``embedding_space`` names it (default: the folder's name,
    or ``project<d>-s<seed>``).
    """

    config_section = "algorithm.params.features"

    root: str | None = None
    prefer: Literal["h5", "pt"] = "h5"
    project: Annotated[int, Ge(0)] = 0
    seed: int = 0
    nonlinear: bool = False
    embedding_space: str = ""

    def validate(self) -> None:
        require(
            (self.root is None) != (self.project == 0),
            "root",
            "exactly one of root (a folder of bag files) or project (a dimension)",
            {"root": self.root, "project": self.project},
        )


@dataclass(frozen=True)
class MILTrainParams(AlgorithmParams):
    """Which MIL model each client trains (local training itself is ``train.*``).

    ``models``: architecture per client or domain (a key is a client id such as
    ``hospital_0/c0`` or a domain), default ``model.backbone`` with
    ``model.params``; ``model_params``: parameters per architecture name for the
    ones chosen in ``models`` (e.g. ``{transmil: {hidden: 64}}``); ``features``:
    per client or domain (keys as ``models``) its own feature extractor's bags
    (:class:`FeatureSetParams`), default the dataset's.
    """

    models: dict[str, str] = field(default_factory=dict)
    model_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    features: dict[str, dict[str, Any]] = field(default_factory=dict)

    def feature_sets(self) -> dict[str, FeatureSetParams]:
        """``features`` as checked :class:`FeatureSetParams`, by key."""
        from fedpath.schema import ConfigError, FieldError, from_mapping

        out = {}
        for k, v in self.features.items():
            try:
                out[k] = from_mapping(
                    FeatureSetParams, v, f"algorithm.params.features.{k}"
                )
            except FieldError as err:  # already the full key: no second prefix
                raise ConfigError(str(err)) from None
        return out

    def validate(self) -> None:
        self.feature_sets()
        unused = sorted(set(self.model_params) - set(self.models.values()))
        require(
            not unused,
            "model_params",
            "parameters only for architectures chosen in algorithm.params.models "
            f"({sorted(set(self.models.values()))})",
            unused,
        )


@dataclass(frozen=True)
class FedAvgMILParams(MILTrainParams):
    """``mu``: FedProx's proximal weight (0: FedAvg)."""

    mu: Annotated[float, Ge(0)] = 0.0
    bn_buffers: Literal["average", "pooled"] = "average"

    def validate(self) -> None:
        super().validate()
        require(
            not self.models,
            "models",
            "no per-client architectures: weight averaging needs one architecture "
            "for every client (set model.backbone instead)",
            self.models,
        )
        require(
            not self.features,
            "features",
            "no per-client feature extractors: weight averaging needs one embedding "
            "space for every client (use fedhd with spaces: adapt)",
            sorted(self.features),
        )


@dataclass(frozen=True)
class FedProxMILParams(FedAvgMILParams):
    """FedProx's default proximal weight."""

    mu: float = 0.01


@dataclass(frozen=True)
class SpacesChoice(MILTrainParams):
    """``spaces``: ``same`` refuses clients in different embedding spaces
    (per-client ``features``); ``adapt`` lets them federate, each method in its
    own way (docs/fedhd_heterogeneous.md)."""

    spaces: Literal["same", "adapt"] = "same"

    @property
    def adapt(self) -> bool:
        return self.spaces == "adapt"


@dataclass(frozen=True)
class SpacesParams(SpacesChoice):
    """Clients in different embedding spaces, for the methods that share
    synthetic slides (FedHD, mean matching, DESA, FedDGM).

    ``spaces: adapt`` gives each receiver's MIL model one input adapter per
    foreign space (``adapter: linear``: LayerNorm + Linear; ``mlp``: LayerNorm,
    Linear to ``adapter_hidden`` (0: the own dimension), GELU, Linear), trained
    on the received synthetic slides only (docs/fedhd_heterogeneous.md).
    """

    adapter: Literal["linear", "mlp"] = "linear"
    adapter_hidden: Annotated[int, Ge(0)] = 0


@dataclass(frozen=True)
class FedHDParams(SpacesParams):
    """FedHD's knobs; defaults are the paper's (M=16, T=1000, 1000 iterations,
    t0=30 of its 50 local epochs, GCE q=0.7). Local training is ``train.*``
    (the paper: Adam, lr 2e-4, weight decay 1e-5, ``train.local_epochs: 50``).

    ``covariance``: ``full`` or ``diag`` component covariances; ``mode``: ``gmm``
    (FedHD), ``single`` (one Gaussian), ``mean`` (mean matching only);
    ``many_to_one``: 0 = one synthetic slide per real slide, k > 0 = k per class
    from the pooled slides of a client; ``max_patches``: patches per slide used to
    fit its mixture (a seeded subsample; null = all).

    ``spaces`` defaults to ``adapt``: the paper's hospitals keep different
    extractors, and with every client in one space ``adapt`` trains exactly
    what ``same`` does (tests/algorithms/test_fedhd_hetero.py); ``same`` is
    the option that refuses clients in different spaces.
    """

    spaces: Literal["same", "adapt"] = "adapt"
    components: Annotated[int, Ge(1)] = 16
    covariance: Literal["full", "diag"] = "full"
    tokens: Annotated[int, Ge(2)] = 1000
    iters: Annotated[int, Ge(0)] = 1000
    distill_lr: float = 0.05
    mode: Literal["gmm", "single", "mean"] = "gmm"
    init: Literal["auto", "gmm", "random"] = "auto"
    many_to_one: Annotated[int, Ge(0)] = 0
    t0: Annotated[int, Ge(0)] = 30
    curriculum: bool = True
    loss_synthetic: Literal["gce", "ce"] = "gce"
    q: Annotated[float, Range(0, 1, lo_open=True)] = 0.7
    too_few: Literal["error", "reduce"] = "error"
    # privacy guard of the shared slides (fedpath.mil.privacy): real slides with
    # fewer patches are not distilled; every token is kept at least
    # min_token_distance x the median patch-to-nearest-patch distance away from
    # every real patch embedding of the client (0: off)
    min_patches: Annotated[int, Ge(1)] = 8
    min_token_distance: Annotated[float, Ge(0)] = 0.5
