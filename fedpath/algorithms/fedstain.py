"""FedStain: federated domain generalization with higher-order stain statistics.

Specification: FedStain paper, Sections III-IV, Algorithms 1-2, Eqs. 1-6.

Per round (Algorithm 2): a ``stats`` stage, in which every client uploads the
per-image channel skewness and excess kurtosis (Eq. 2; Alg. 2 lines 5-6) of
ceil(r * n_i) images in the configured colour space (``statistics: moments``:
mean and std as well; or another Table V pair), and the server returns each
client the pool of the
*other* clients' statistics; then local training on four versions of every batch:

* ``X``: the original;
* ``X_stain = RandStain(X)`` (Level 1: the higher-order step toward a pooled
  (skewness, kurtosis), the image's own mean and std kept; with ``statistics:
  moments`` first Eq. 1's sound reading toward a pooled mean and std), with
  probability ``randstain_p``;
* ``X1, X2 = MixStyle(AugMix(X))`` (Level 2): geometric AugMix, then
  higher-order MixStyle (Algorithm 1, ``mixstyle_mode="sound"`` by default;
  ``"paper"`` is the literal skewness-as-shift, kurtosis-as-scale reading). Alg. 2
  writes ``MixStyle(X) o AugMix(X)``; read as a composition, AugMix comes first.

Loss (Eq. 6): ``L = L_CLS + alpha * L_RA + beta * L_JS`` with ``L_CLS`` the mean
cross-entropy over the versions (``cls_on="original"``: the original only; the
paper does not say), ``L_RA`` the mean supervised-contrastive loss (Eq. 3-4,
cosine similarity, temperature 0.1) between ``Z = h(X)`` and each augmented
version's features, and ``L_JS`` the Jensen-Shannon divergence across all versions'
predictions (Eq. 5). The four versions go through the network as one batch (same
result as four passes up to BatchNorm batch statistics, which then cover all
versions). Aggregation: FedAvg.

MixStyle level (``mixstyle_level``): Algorithm 2 mixes *pixels* (default, above);
Sec. III-D2 mixes *intermediate feature statistics*. ``"features"`` reads it so:
``X1, X2 = AugMix(X)``, and after each encoder stage in ``mixstyle_layers`` the
feature statistics (of kind ``statistics``) of every ``X1``/``X2`` row are mixed,
``lambda ~ Beta(mixstyle_alpha, mixstyle_alpha)``, with those of the same image's
RandStain row of the same batch, whose stain was drawn from the other sites'
pooled pixel statistics. The other sites drive the mixing without any feature
statistic leaving a client (the exchange is unchanged); training only, never at
evaluation (the hook is passed in :meth:`FedStainClient.loss` alone).

Ablation switches (Table V and component ablations): ``statistics`` selects what
the clients exchange and what RandStain and MixStyle use (``skew_kurt``, the
default and the paper's; ``moments``: all four; or another Table V pair, then
the *only* array uploaded: a ``mean_std`` client sends 2 numbers per channel and
its RandStain is plain RandStainNA, a ``skew_kurt`` client's RandStain only
reshapes, keeping each image's mean and std), and
``randstain``, ``higher_order``, ``augmix``, ``mixstyle``, ``alpha`` (0 = no L_RA),
``beta`` (0 = no L_JS) switch the parts off.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fedpath.algorithms.base import ServerContext, register_algorithm
from fedpath.algorithms.stats_exchange import StatsExchangeClient, StatsExchangeServer
from fedpath.algorithms.views import ViewOutputs, forward_views
from fedpath.config import ConfigError
from fedpath.losses import js_divergence, paired_supcon
from fedpath.models.backbones import FeatureHook
from fedpath.params.algorithms import (  # noqa: F401  (StatChoice: its old home)
    FedStainParams,
    StatChoice,
)
from fedpath.stain import (
    ShapeFit,
    StatPool,
    augmix,
    image_statistics,
    mixstyle,
    randstain,
    to_space,
)
from fedpath.stain._random import sample_beta
from fedpath.stain.mixstyle import mix_feature_statistics
from fedpath.types import ArrayDict
from fedpath.wire import Wire


def encoder_stages(model: nn.Module) -> int:
    """How many stages ``model``'s image encoder has (0 if it has none)."""
    stages = getattr(getattr(model, "encoder", None), "stages", None)
    return len(stages) if stages is not None else 0


def check_mixstyle_layers(
    params: FedStainParams, model: nn.Module, backbone: str
) -> None:
    """ConfigError unless every ``mixstyle_layers`` index is a stage of the
    configured backbone's encoder (its valid range depends on the backbone:
    ``small_cnn`` one stage per width, ResNets 4, EfficientNet-Lite 8, ViTs
    ``num_stages``)."""
    layers = params.feature_layers()
    if not layers:
        return
    n = encoder_stages(model)
    bad = [i for i in layers if not 0 <= i < n]
    if bad:
        valid = f"indices 0-{n - 1}" if n else "none: it has no encoder stages"
        raise ConfigError(
            f"config key 'algorithm.params.mixstyle_layers': {list(layers)} names "
            f"stage(s) {bad} that backbone {backbone!r} does not have; it has {n} "
            f"encoder stages, valid {valid}"
        )


class FedStainClient(StatsExchangeClient):
    """FedStain client: RandStain + AugMix + higher-order MixStyle, SupCon + JS."""

    params: FedStainParams

    def compute_stats(self, images: torch.Tensor) -> ArrayDict:
        """The upload: only the statistics of ``statistics`` (``stat_layout``)."""
        p = self.params
        y = to_space(images, p.space)
        return {p.statistics: image_statistics(y, p.statistics).float().numpy()}

    def begin(self, model: nn.Module, payload: Any, state: Any) -> None:
        """One pool of the received statistics, used by RandStain and MixStyle."""
        super().begin(model, payload, state)
        p = self.params
        stats = torch.from_numpy(self.pool[p.statistics])
        self.rs_pool = StatPool(stats, space=p.space, kind=p.statistics).fit()
        self.ms_pool = self.rs_pool
        check_mixstyle_layers(p, model, self.ctx.task.cfg.model.backbone)

    def shape_fit(self) -> ShapeFit:
        p = self.params
        return ShapeFit(p.shape_iters, p.shape_fit_pixels, p.shape_refine)

    def views(self, x: torch.Tensor) -> list[torch.Tensor]:
        """[X, X_stain?, X1, X2] for one batch (Algorithm 2, lines 14-16)."""
        p, g = self.params, self.generator
        out = [x]
        if p.randstain:
            out.append(
                randstain(
                    x,
                    self.rs_pool,
                    g,
                    p=p.randstain_p,
                    mode=p.randstain_sampling,
                    higher_order=p.higher_order,
                    reading=p.randstain_reading,
                    shape_fit=self.shape_fit(),
                )
            )
        for _ in range(2):
            v = (
                augmix(x, g, width=p.augmix_width, severity=p.augmix_severity)
                if p.augmix
                else x
            )
            # at feature level the views are mixed inside the encoder (loss)
            if p.mixstyle and p.mixstyle_level == "pixels":
                v = mixstyle(
                    v,
                    self.ms_pool,
                    g,
                    alpha=p.mixstyle_alpha,
                    mode=p.mixstyle_mode,
                    shape_fit=self.shape_fit(),
                )
            out.append(v)
        return out

    def feature_mixer(self, b: int) -> FeatureHook:
        """The encoder hook of ``mixstyle_level="features"`` for one batch of
        ``b`` images laid out as ``[X, X_stain, X1, X2]`` (``b`` rows each).

        After every stage in ``mixstyle_layers`` the ``X1`` and ``X2`` rows mix
        their feature statistics with the aligned ``X_stain`` rows' (the same
        image in a stain drawn from the other sites' pooled statistics), with
        ``2b`` fresh ``Beta(mixstyle_alpha, mixstyle_alpha)`` weights per stage;
        the original and RandStain rows pass unchanged. Draws come from the
        client's augmentation generator, after those of :meth:`views`.
        """
        p, g = self.params, self.generator
        layers = set(p.feature_layers())
        fit = self.shape_fit()

        def hook(stage: int, fmap: torch.Tensor) -> torch.Tensor:
            if stage not in layers:
                return fmap
            kept, views = fmap[: 2 * b], fmap[2 * b :]
            partner = fmap[b : 2 * b].repeat(2, 1, 1, 1)
            lam = sample_beta(
                p.mixstyle_alpha, p.mixstyle_alpha, (2 * b,), g, fmap.device
            )
            mixed = mix_feature_statistics(views, partner, lam, p.statistics, fit)
            return torch.cat([kept, mixed])

        return hook

    def forward_mixed(
        self, model: nn.Module, versions: list[torch.Tensor]
    ) -> ViewOutputs:
        """:func:`~fedpath.algorithms.views.forward_views` with
        :meth:`feature_mixer` hooked into the encoder (one pass, same layout)."""
        b = versions[0].shape[0]
        hook = self.feature_mixer(b)
        z = model.encode(torch.cat(versions), hook)  # type: ignore[operator]
        logits = model.classifier(z)  # type: ignore[operator]
        return ViewOutputs(z, logits, z.split(b), logits.split(b))

    def loss(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> dict[str, Any]:
        p = self.params
        with torch.no_grad():
            versions = self.views(x)
        if p.mixstyle and p.mixstyle_level == "features":
            out = self.forward_mixed(model, versions)
        else:
            out = forward_views(model, versions)
        m, logits, zs, ls = len(versions), out.logits, out.zs, out.ls
        if p.cls_on == "all":
            l_cls = self.ctx.cross_entropy(logits, y.repeat(m))
        else:
            l_cls = self.ctx.cross_entropy(ls[0], y)
        zero = logits.new_zeros(())
        l_ra = (
            torch.stack(
                [paired_supcon(zs[0], zv, y, p.temperature) for zv in zs[1:]]
            ).mean()
            if p.alpha > 0
            else zero
        )
        l_js = js_divergence(list(ls)) if p.beta > 0 else zero
        total = l_cls + p.alpha * l_ra + p.beta * l_js
        return {
            "loss": total,
            "cls": l_cls.detach(),
            "ra": l_ra.detach(),
            "js": l_js.detach(),
        }


class FedStainServer(StatsExchangeServer):
    """FedAvg plus the pooled stain statistics (Algorithm 2, lines 3-9 and 27)."""

    def __init__(self, params: FedStainParams, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        # a bad stage index fails before any client trains, naming the range
        if params.feature_layers():
            with torch.random.fork_rng(devices=[]):  # leaves the run's RNG alone
                model = ctx.build_model()
            check_mixstyle_layers(params, model, ctx.task.cfg.model.backbone)


register_algorithm(
    "fedstain",
    FedStainClient,
    FedStainServer,
    FedStainParams,
    "FedStain: higher-order stain statistics exchange, RandStain + AugMix + "
    "MixStyle, SupCon + JS",
    wire=Wire(
        "weights and per-image stain statistics",
        {"stats": "statistics", "fit": "weights"},
        caps={"upload_ratio": "max_upload_ratio", "stats_noise": "min_stats_noise"},
    ),
)
