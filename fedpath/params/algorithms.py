"""The image algorithms' params dataclasses (``algorithm.params``), without PyTorch.

Each is re-exported by its algorithm's module (``fedpath.algorithms.fedstain``
and so on); see :mod:`fedpath.params` for why they live here. The slide-bag
(MIL) algorithms' params are in :mod:`.mil_train` and :mod:`.mil_baselines`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

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
    MixStyle use: skewness and kurtosis (the paper's Algorithm 2, lines 5-6, and
    its Table V row), all four moments (``moments``: fedpath's option, which also
    gives Eq. 1 its mean/std pool), or another Table V pair, so that each row of
    the Table V ablation neither sends nor uses the other statistics
    (docs/fidelity/fedstain.md).
    """

    upload_ratio: Annotated[float, Probability] = 0.1  # r (Tables III-IV)
    refresh: Literal["round", "once"] = "round"
    space: Literal["rgb", "lab", "hed"] = "lab"  # RandStainNA works in LAB
    statistics: StatChoice = "skew_kurt"  # Alg. 2 lines 5-6
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
    crop_min_scale / hue / blur_p: the SimCLR pipeline of FedAD Section 5.2
    (jitter 0.4 on brightness, contrast, saturation and hue; ``hue: 0.1`` is
    SimCLR's own s = 0.5 value, docs/fidelity/fedad.md), shared by every method
    of the FedAD comparison so that they differ in the method, not the views.
    bn_buffers: how BatchNorm running statistics are aggregated.
    """

    temperature: Annotated[float, Gt(0)] = 0.5
    crop_min_scale: Annotated[float, Range(0, 1, lo_open=True)] = 0.08
    hue: Annotated[float, Range(0, 0.5)] = 0.4  # Sec. 5.2 (0.1: SimCLR s = 0.5)
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
    atsa_scale: what Eq. 6 is fed. ``literal`` (default): D = Delta, the
    paper as written (its thresholds assume Delta ~ 0.2 at the start);
    ``relative``: D = atsa_anchor * Delta / (Delta_ref + eps), Delta_ref the
    mean Delta of the first ``atsa_warmup`` rounds, so the paper's thresholds
    apply to the instability relative to the run's start at any model size
    (fedpath's option for CPU-scale models). See :mod:`fedpath.ssl.atsa`.
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
    atsa_scale: Literal["relative", "literal"] = "literal"
    atsa_warmup: Annotated[int, Ge(1)] = 3
    atsa_anchor: Annotated[float, Gt(0)] = 0.2

    def validate(self) -> None:
        check_atsa_bounds(
            self.lambda_min, self.lambda_max, self.alpha, self.k, self.eps
        )
