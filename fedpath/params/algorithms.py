"""The algorithms' params dataclasses (``algorithm.params``), without PyTorch.

Each is re-exported by its algorithm's module (``fedpath.algorithms.fedstain``
and so on); see :mod:`fedpath.params` for why they live here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fedpath.schema import Checked, Ge, Gt, Probability, Range, require
from fedpath.ssl.atsa import check_atsa_bounds

if TYPE_CHECKING:
    from fedpath.ssl.augment import SimCLRAugment


class AlgorithmParams(Checked):
    """Base of every algorithm's params dataclass: constraints are declared on the
    fields (``Annotated[float, Ge(0)]``, see :mod:`fedpath.schema`) and errors name
    the ``algorithm.params`` key."""

    config_section = "algorithm.params"


@dataclass(frozen=True)
class FedAvgParams:
    """bn_buffers: 'average' (FedAvg) or 'pooled' BatchNorm running variance."""

    bn_buffers: Literal["average", "pooled"] = "average"


@dataclass(frozen=True)
class DPFedAvgParams(AlgorithmParams):
    """Client-level DP-FedAvg (McMahan et al., ICLR 2018): each client's update is
    clipped to L2 norm ``clip`` before it leaves; the server averages the updates
    with equal weights and adds Gaussian noise of std ``noise_multiplier x clip /
    m`` (m: clients in the round); (epsilon, ``delta``) from an RDP accountant:
    ``accountant: opacus`` (Poisson sampling at rate k / n) or ``flower``
    (Flower's, no amplification by sampling: the same at k = n, larger below)."""

    clip: Annotated[float, Gt(0)] = 1.0
    noise_multiplier: Annotated[float, Ge(0)] = 1.0
    delta: Annotated[float, Range(0.0, 1.0, lo_open=True, hi_open=True)] = 1e-5
    accountant: Literal["opacus", "flower"] = "opacus"


@dataclass(frozen=True)
class FedProxParams(AlgorithmParams):
    """mu: weight of the proximal term (FedProx paper grid: 0.001-1)."""

    mu: Annotated[float, Ge(0)] = 0.01
    bn_buffers: Literal["average", "pooled"] = "average"


@dataclass(frozen=True)
class FedBNParams:
    """bn_buffers: how the server's evaluation copy averages running statistics."""

    bn_buffers: Literal["average", "pooled"] = "average"


@dataclass(frozen=True)
class StrapParams(AlgorithmParams):
    """p: probability of stylizing an image; texture: add RandConv texture."""

    p: Annotated[float, Probability] = 1.0
    texture: bool = True
    texture_mix: Literal["random", "full"] = "random"
    bn_buffers: Literal["average", "pooled"] = "average"


StatChoice = Literal[
    "moments", "mean_std", "quantile_cv", "local_mean_mad", "mean_iqr", "skew_kurt"
]


@dataclass(frozen=True)
class FedStainParams(AlgorithmParams):
    """FedStain hyper-parameters (paper defaults where it gives them).

    ``statistics`` is what the clients exchange and what both RandStain and
    MixStyle use: all four moments (FedStain), or only one Table V pair, so that
    each row of the Table V ablation neither sends nor uses the other statistics.
    """

    upload_ratio: Annotated[float, Probability] = 0.1  # r (Tables III-IV)
    refresh: Literal["round", "once"] = "round"
    space: Literal["rgb", "lab", "hed"] = "lab"  # RandStainNA works in LAB
    statistics: StatChoice = "moments"
    randstain: bool = True
    randstain_p: Annotated[float, Probability] = 0.9  # Sec. V-B
    randstain_sampling: Literal["fitted", "direct"] = "fitted"
    randstain_reading: Literal["sound", "paper"] = "sound"
    higher_order: bool = True
    # Budget of the higher-order (skewness/kurtosis) fit per image and channel:
    # iterations on a subsample of shape_fit_pixels pixels, then shape_refine
    # full-resolution steps. An augmentation needs the moments moved toward the
    # target, not hit to 1e-5; this keeps the step a few ms per batch.
    shape_iters: Annotated[int, Ge(1)] = 3
    shape_fit_pixels: Annotated[int, Ge(16)] = 512
    shape_refine: Annotated[int, Ge(0)] = 0
    augmix: bool = True
    augmix_width: int = 3
    augmix_severity: int = 3
    mixstyle: bool = True
    mixstyle_mode: Literal["sound", "paper"] = "sound"
    mixstyle_alpha: Annotated[float, Gt(0)] = 0.1
    # Where Level-2 MixStyle acts: on the pixels of the AugMix views (Alg. 2, the
    # default) or on the encoder's intermediate feature statistics (Sec. III-D2),
    # after the stages in mixstyle_layers (default [0, 1]; range per backbone in
    # docs/fedstain.md), mixed with the same images' RandStain versions' feature
    # statistics, in training only. Nothing new leaves the client.
    mixstyle_level: Literal["pixels", "features"] = "pixels"
    mixstyle_layers: list[int] | None = None
    alpha: Annotated[float, Ge(0)] = 0.1  # weight of L_RA (grid-searched in the paper)
    beta: Annotated[float, Ge(0)] = 0.1  # weight of L_JS
    temperature: Annotated[float, Gt(0)] = 0.1  # Sec. V-B
    cls_on: Literal["all", "original"] = "all"
    empty_pool: Literal["own", "error"] = "own"
    bn_buffers: Literal["average", "pooled"] = "average"
    # Leakage defences of the uploaded statistics (off by default: the published
    # results were measured without them; benchmarks/bench_leakage.py measures
    # what they buy and cost). stats_noise: Gaussian noise, as a fraction of each
    # statistic's spread over the client's own upload; stats_decimals: rounding;
    # shuffle_pool: the server sends the pool in a random order, not by client.
    stats_noise: Annotated[float, Ge(0)] = 0.0
    stats_decimals: Annotated[int, Ge(0)] | None = None
    shuffle_pool: bool = False

    def validate(self) -> None:
        require(
            self.mixstyle_mode == "sound"
            or self.statistics in ("moments", "skew_kurt"),
            "statistics",
            "'moments' or 'skew_kurt' when mixstyle_mode is 'paper'",
            self.statistics,
        )
        # Eq. 1's literal reading rescales by a template std: only the moments and
        # the mean/std pair carry one.
        require(
            self.randstain_reading == "sound"
            or self.statistics in ("moments", "mean_std"),
            "statistics",
            "'moments' or 'mean_std' when randstain_reading is 'paper'",
            self.statistics,
        )
        # With skewness/kurtosis only, the shape step is all RandStain can apply.
        require(
            self.higher_order or not self.randstain or self.statistics != "skew_kurt",
            "higher_order",
            "true when statistics is 'skew_kurt' and randstain is on (RandStain "
            "would leave every image unchanged)",
            self.higher_order,
        )

        self._validate_mixstyle_level()

    def _validate_mixstyle_level(self) -> None:
        """``mixstyle_layers`` only with feature-level MixStyle, and what that
        level needs (the backbone's stage count is checked when the model is
        built: :func:`fedpath.algorithms.fedstain.check_mixstyle_layers`)."""
        features = self.mixstyle_level == "features"
        require(
            self.mixstyle_layers is None or features,
            "mixstyle_layers",
            "null (unset) when mixstyle_level is 'pixels'; set "
            "mixstyle_level: features to mix feature statistics after those stages",
            self.mixstyle_layers,
        )
        if not features:
            return
        layers = self.mixstyle_layers
        require(
            layers is None
            or (
                len(layers) > 0
                and all(
                    isinstance(i, int) and not isinstance(i, bool) and i >= 0
                    for i in layers
                )
                and len(set(layers)) == len(layers)
            ),
            "mixstyle_layers",
            "a non-empty list of distinct encoder stage indices >= 0",
            layers,
        )
        require(
            self.mixstyle,
            "mixstyle",
            "true when mixstyle_level is 'features' (mixstyle: false turns "
            "MixStyle off at either level)",
            self.mixstyle,
        )
        require(
            self.randstain,
            "randstain",
            "true when mixstyle_level is 'features': the RandStain versions carry "
            "the other sites' stains whose feature statistics are mixed in",
            self.randstain,
        )
        require(
            self.mixstyle_mode == "sound",
            "mixstyle_mode",
            "'sound' when mixstyle_level is 'features' (the literal Algorithm 1 "
            "reading is a pixel-level reproduction option)",
            self.mixstyle_mode,
        )

    def feature_layers(self) -> tuple[int, ...]:
        """The encoder stages after which feature statistics are mixed: none at
        pixel level, ``mixstyle_layers`` (default ``(0, 1)``, Zhou et al.'s
        after-the-first-two-stages) at feature level."""
        if self.mixstyle_level != "features":
            return ()
        return tuple(self.mixstyle_layers) if self.mixstyle_layers else (0, 1)

    def stat_layout(self) -> dict[str, tuple[int, int]]:
        """name -> (channels, statistics) of what a client uploads: one array named
        after ``statistics``, 3 channels (in RGB, LAB and HED alike) by 4 moments
        or the 2 statistics of a Table V pair. Nothing else leaves the client, so
        a Table V row exchanges only its pair."""
        return {self.statistics: (3, 4 if self.statistics == "moments" else 2)}


@dataclass(frozen=True)
class FedCCRLParams(AlgorithmParams):
    """FedCCRL defaults from its released code (lambda1 = lambda2 = 0.1, t = 0.1)."""

    upload_ratio: Annotated[float, Probability] = 0.1
    refresh: Literal["round", "once"] = "round"
    mixstyle_alpha: Annotated[float, Gt(0)] = 0.1
    lambda1: Annotated[float, Ge(0)] = 0.1  # representation alignment (contrastive)
    lambda2: Annotated[float, Ge(0)] = 0.1  # prediction alignment (JS)
    temperature: Annotated[float, Gt(0)] = 0.1
    augmix: Literal["torchvision", "geometric"] = "torchvision"
    empty_pool: Literal["own", "error"] = "own"
    bn_buffers: Literal["average", "pooled"] = "average"
    # Leakage defences of the uploaded statistics (off by default: the published
    # results were measured without them; benchmarks/bench_leakage.py measures
    # what they buy and cost). stats_noise: Gaussian noise, as a fraction of each
    # statistic's spread over the client's own upload; stats_decimals: rounding;
    # shuffle_pool: the server sends the pool in a random order, not by client.
    stats_noise: Annotated[float, Ge(0)] = 0.0
    stats_decimals: Annotated[int, Ge(0)] | None = None
    shuffle_pool: bool = False

    def stat_layout(self) -> dict[str, tuple[int, int]]:
        return {"mean_std": (3, 2)}


@dataclass(frozen=True)
class FedAlignParams(FedCCRLParams):
    """FedCCRL's parameters plus selective transfer and the feature MSE weight."""

    lambda3: Annotated[float, Ge(0)] = 0.1
    clusters: Annotated[int, Ge(1)] = 7
    selected_fraction: Annotated[float, Range(0, 1, lo_open=True)] = 0.5


@dataclass(frozen=True)
class SSLParams(AlgorithmParams):
    """Common to every self-supervised method.

    temperature: NT-Xent tau (FedAD gives none; 0.5 is SimCLR's small-batch value).
    crop_min_scale / hue / blur_p: the SimCLR pipeline of FedAD Section 5.2.
    bn_buffers: how BatchNorm running statistics are aggregated.
    """

    temperature: Annotated[float, Gt(0)] = 0.5
    crop_min_scale: Annotated[float, Range(0, 1, lo_open=True)] = 0.08
    hue: Annotated[float, Range(0, 0.5)] = 0.1
    blur_p: Annotated[float, Probability] = 0.5
    bn_buffers: Literal["average", "pooled"] = "average"

    def augmentation(self) -> SimCLRAugment:
        from fedpath.ssl.augment import SimCLRAugment  # lazy: imports PyTorch

        return SimCLRAugment(
            crop_min_scale=self.crop_min_scale, hue=self.hue, blur_p=self.blur_p
        )


@dataclass(frozen=True)
class FedAvgSSLParams(SSLParams):
    """proj_dim: output of the projection head (SimCLR: 128)."""

    proj_dim: Annotated[int, Ge(1)] = 128


@dataclass(frozen=True)
class FedProxSSLParams(FedAvgSSLParams):
    """mu: weight of the proximal term (FedProx grid 0.001-1)."""

    mu: Annotated[float, Ge(0)] = 0.01


@dataclass(frozen=True)
class MOONParams(FedAvgSSLParams):
    """mu = 1.0 and tau = 0.5 as in the FedAD paper / the MOON reference."""

    mu: Annotated[float, Ge(0)] = 1.0
    moon_temperature: Annotated[float, Gt(0)] = 0.5
    contrast_on: Literal["features", "projection"] = "features"


@dataclass(frozen=True)
class FedDisParams(FedAvgSSLParams):
    """recon_weight: weight of the reconstruction term; recon_size: its resolution."""

    recon_weight: Annotated[float, Ge(0)] = 1.0
    recon_size: Annotated[int, Ge(1)] = 8


@dataclass(frozen=True)
class ELCFSParams(FedAvgSSLParams):
    """images_per_client: amplitudes each client shares; beta: low-band size."""

    images_per_client: Annotated[int, Ge(1)] = 8
    beta: Annotated[float, Range(0, 1, lo_open=True)] = 0.2


@dataclass(frozen=True)
class FedADParams(SSLParams):
    """FedAD hyperparameters (Section 4 and Table 3 where the text gives them).

    gamma: orthogonality weight (Eq. 4; the paper's CV picks 2.0).
    proj_dim: d_s = d_d = dim(z_g) (128 in the paper, fixed).
    head_hidden: hidden width of g_k (default: the feature dimension F).
    atsa: use the ATSA curriculum; false sends ``static_lambda`` every round.
    lambda_min, lambda_max, alpha, k, eps: Eq. 5-6.
    atsa_scale: what Eq. 6 is fed. ``relative`` (default): D = atsa_anchor *
    Delta / (Delta_ref + eps), Delta_ref the mean Delta of the first
    ``atsa_warmup`` rounds, so the paper's thresholds apply to the instability
    relative to the run's start at any model size; ``literal``: D = Delta, the
    paper as written (its thresholds assume Delta ~ 0.2 at the start). See
    :mod:`fedpath.ssl.atsa`.
    """

    gamma: Annotated[float, Ge(0)] = 2.0
    proj_dim: Annotated[int, Ge(1)] = 128
    head_hidden: Annotated[int | None, Ge(1)] = None
    atsa: bool = True
    static_lambda: Annotated[float, Ge(0)] = 0.5
    lambda_min: float = 0.1
    lambda_max: float = 1.0
    alpha: float = 0.8
    k: float = 20.0
    eps: float = 1e-8
    atsa_scale: Literal["relative", "literal"] = "relative"
    atsa_warmup: Annotated[int, Ge(1)] = 3
    atsa_anchor: Annotated[float, Gt(0)] = 0.2

    def validate(self) -> None:
        check_atsa_bounds(
            self.lambda_min, self.lambda_max, self.alpha, self.k, self.eps
        )


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
    """

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
