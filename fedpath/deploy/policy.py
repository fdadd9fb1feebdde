"""The node policy: what a hospital's node will run, and what may leave it.

A coordinator chooses the experiment; a hospital decides what its node serves.
The policy is set when the node starts (``fedpath flower supernode --policy
FILE``, plus ``--allow-non-private NAME``), travels in the node config (never in
the coordinator's run config) and is enforced on the node, for every message:

1. **before any work** (:func:`check_run`, also answering the coordinator's
   ``hello``): the run's algorithm must be one the node serves, and the run may
   not ask for more than the caps (share of images whose statistics are
   uploaded, synthetic tokens per slide, rounds);
2. **per stage** (:func:`check_stage`): a stage that uploads raw data (the
   pooled upper bounds' ``upload``) needs the algorithm's explicit opt-in, and
   an unknown stage is refused;
3. **on the reply** (:func:`check_reply`), whatever the algorithm code did: no
   array shaped like an image of the node's dataset unless raw data was opted
   in, at most ``max_statistics`` statistics rows per upload, at most
   ``max_tokens`` tokens per synthetic slide.

A refusal raises :class:`PolicyError` naming the rule and how the hospital would
change it; the node turns it into an error reply, so the coordinator's log says
why, instead of waiting for a silent node.

The default policy serves every algorithm whose uploads are weights, statistics,
amplitude spectra or synthetic slides (:data:`UPLOADS`), and refuses the
non-private ones (:data:`NON_PRIVATE`: they upload images, labels or real
embeddings) until the policy names them in ``allow_non_private``; an algorithm
this module does not know (a plugin) counts as non-private. A policy file::

    # what this node serves (default: every private algorithm)
    algorithms: [fedavg, fedprox, fedbn, fedstain]
    allow_non_private: []      # e.g. [central_supervised] for a pooled baseline
    max_upload_ratio: 0.1      # FedStain / FedCCRL / FedAlign upload_ratio
    max_statistics: null       # statistics rows per upload (null: no cap)
    max_tokens: 1000           # FedHD synthetic tokens per slide
    max_rounds: null           # rounds a run may ask for (null: no cap)
    min_stats_noise: 0.0       # FedStain / FedCCRL stats_noise a run must use
    require_secure_aggregation: false  # weights leave only masked (SecAgg+)
    max_dp_clip: null          # dp_fedavg clip (L2 norm of an update) at most this
    require_dp: false          # serve only dp_fedavg runs that declare noise
    share_validation_predictions: false  # validation probabilities + labels may
                               # leave (temperature, operating point)

With ``require_secure_aggregation`` the node serves only runs whose coordinator
uses SecAgg+ (Flower run config ``secure-aggregation = "secaggplus"``, refused
at the ``hello`` otherwise), only the algorithms SecAgg+ can carry
(:data:`fedpath.runtime.secagg.ALGORITHMS`), and answers no stage in the clear
but the evaluation and validation stages (metrics; validation predictions
only with ``share_validation_predictions``): a plain ``fit`` message gets an
error reply
(:func:`plain_upload_refusal`, checked by the node's SecAgg+ mod).

Client-level DP (:data:`DP_CLIPPED`, ``dp_fedavg``): the node clips every
``fit`` reply with Flower's ``fixedclipping_mod`` to the run's
``algorithm.params.clip`` (:mod:`fedpath.runtime.flower.central_dp`).
``max_dp_clip`` caps that clip, i.e. how far one round's upload may move the
model; ``require_dp`` serves only those algorithms, in runs whose
``noise_multiplier`` is positive. The noise itself is added by the coordinator,
so the node checks the run declares it; the clip is what the node enforces.

This module imports neither PyTorch nor Flower: ``fedpath flower supernode``
checks and prints the policy before it starts anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import yaml

from fedpath.schema import Checked, ConfigError, Ge, Gt, Range, from_mapping

if TYPE_CHECKING:
    from fedpath.config import ExperimentConfig
    from fedpath.types import Payload

#: What each built-in algorithm's clients send up, besides scalars (counts,
#: losses). A test checks that every registered algorithm is listed.
UPLOADS: dict[str, str] = {
    "fedavg": "weights",
    "dp_fedavg": "clipped weights (noised at the coordinator)",
    "fedprox": "weights",
    "fedbn": "weights (normalization layers stay local)",
    "strap": "weights",
    "fedstain": "weights and per-image stain statistics",
    "fedccrl": "weights and per-image channel mean/std",
    "fedalign": "weights and per-image channel mean/std",
    "fedavg_ssl": "weights",
    "fedprox_ssl": "weights",
    "moon": "weights",
    "fedad": "encoder weights",
    "feddis": "weights of the invariant part",
    "elcfs": "weights and low-frequency amplitude spectra of 8 images",
    "fedavg_mil": "MIL model weights",
    "fedprox_mil": "MIL model weights",
    "local_mil": "metrics only",
    "fedhd": "synthetic slides (distilled embeddings) and their labels",
    "histofs": "MIL model weights and per-bag pseudo styles (K feature mean/std)",
    "desa": "synthetic anchor slides (distilled embeddings) and logits on them",
    "feddgm": "synthetic slides sampled from per-class Gaussian mixtures",
    "fedhe": "per-class mean bag logits",
    "central_supervised": "every training image and its label",
    "central_simclr": "every training image",
    "pooled_mil": "every real slide's patch embeddings and label",
}
#: The algorithms that upload raw data (images, labels, real embeddings): the
#: non-private upper bounds, served only with the hospital's explicit opt-in.
NON_PRIVATE = frozenset({"central_supervised", "central_simclr", "pooled_mil"})
#: The algorithms whose ``fit`` replies the node clips with Flower's
#: ``fixedclipping_mod`` to ``algorithm.params.clip`` (client-level DP).
DP_CLIPPED = frozenset({"dp_fedavg"})

#: What a stage's reply carries (the stage names of :mod:`fedpath.algorithms.names`)
STAGES: dict[str, str] = {
    "fit": "weights",
    "stats": "statistics",
    "distill": "synthetic slides",
    "amplitude": "amplitude spectra",
    "upload": "raw data (images, labels or real embeddings)",
    "fedpath.evaluate": "metrics",
    "fedpath.validate": "validation metrics (and, with "
    "share_validation_predictions, validation predictions)",
}
#: The stages whose replies are metrics (answered in the clear even with
#: ``require_secure_aggregation``)
METRICS_STAGES = ("fedpath.evaluate", "fedpath.validate")
RAW_STAGE = "upload"
#: node-config key holding the policy (YAML text of the mapping)
NC_POLICY = "policy"


class PolicyError(ConfigError):
    """The node's policy refuses the run, a stage or a reply (names the rule)."""


@dataclass(frozen=True)
class NodePolicy(Checked):
    """A hospital's rules for its node (module docstring)."""

    #: the algorithms this node serves; None: every private one
    algorithms: tuple[str, ...] | None = None
    #: non-private algorithms the hospital opts in to
    allow_non_private: tuple[str, ...] = ()
    max_upload_ratio: Annotated[float, Range(0.0, 1.0)] = 0.1
    max_statistics: Annotated[int, Ge(0)] | None = None
    max_tokens: Annotated[int, Ge(1)] = 1000
    max_rounds: Annotated[int, Ge(1)] | None = None
    #: statistics uploads must carry at least this much noise (``stats_noise``
    #: of FedStain / FedCCRL / FedAlign: benchmarks/bench_leakage.py)
    min_stats_noise: Annotated[float, Ge(0)] = 0.0
    #: weights leave this node only masked by SecAgg+ (module docstring)
    require_secure_aggregation: bool = False
    #: the largest dp_fedavg clip (L2 norm of one update) the node accepts
    max_dp_clip: Annotated[float, Gt(0)] | None = None
    #: serve only client-level DP runs (dp_fedavg with noise_multiplier > 0)
    require_dp: bool = False
    #: let the class probabilities and labels of the validation slides leave
    #: (temperature scaling and the operating point, ``partition.validation``)
    share_validation_predictions: bool = False

    def serves(self, name: str) -> bool:
        if name in self.allow_non_private:
            return True
        if name in NON_PRIVATE or name not in UPLOADS:
            return False
        return self.algorithms is None or name in self.algorithms

    def summary(self) -> str:
        """One line for the node's log."""
        served = sorted(n for n in UPLOADS if self.serves(n))
        extra = sorted(set(self.allow_non_private) - set(UPLOADS))
        caps = (
            f"max_upload_ratio {self.max_upload_ratio:g}, max_statistics "
            f"{self.max_statistics}, max_tokens {self.max_tokens}, max_rounds "
            f"{self.max_rounds}, min_stats_noise {self.min_stats_noise:g}"
        )
        if self.max_dp_clip is not None:
            caps += f", max_dp_clip {self.max_dp_clip:g}"
        if self.require_secure_aggregation:
            caps += "; weights leave only masked (require_secure_aggregation)"
        if self.require_dp:
            caps += "; only client-level DP runs (require_dp)"
        if self.share_validation_predictions:
            caps += "; shares validation predictions (share_validation_predictions)"
        opted = sorted(set(self.allow_non_private))
        text = f"node policy: serves {', '.join(served + extra)}; {caps}"
        if opted:
            what = "; ".join(
                f"{n} uploads {UPLOADS.get(n, 'unknown data')}" for n in opted
            )
            text += f"; NON-PRIVATE algorithms opted in: {what}"
        return text

    def to_yaml(self) -> str:
        """One line of flow-style YAML (Flower's --node-config carries no newline
        or quote)."""
        raw = dataclasses.asdict(self)
        for key in ("algorithms", "allow_non_private"):
            if raw[key] is not None:
                raw[key] = list(raw[key])
        text = yaml.safe_dump(raw, sort_keys=False, default_flow_style=True)
        return " ".join(text.split())


def parse_policy(raw: Any, where: str) -> NodePolicy:
    """A policy from a mapping; errors name ``where`` and the key."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping of policy keys")
    try:
        policy = from_mapping(NodePolicy, dict(raw), "")
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    for key in ("algorithms", "allow_non_private"):
        unknown = [n for n in getattr(policy, key) or () if not _known(n)]
        if unknown:
            raise ConfigError(
                f"{where}: {key} names unknown algorithm(s) {unknown}; known: "
                f"{', '.join(sorted(UPLOADS))} (or a plugin's registered name)"
            )
    return policy


def _known(name: str) -> bool:
    if name in UPLOADS:
        return True
    from fedpath.registry import ALGORITHMS  # plugins (loads them)

    return name in ALGORITHMS


def load_policy(path: Path | None, allow_non_private: Iterable[str] = ()) -> NodePolicy:
    """The policy file (or the default policy), plus opt-ins from the command line."""
    from fedpath.config import read_yaml_mapping

    raw: dict[str, Any] = {}
    where = "the default node policy"
    if path is not None:
        where = f"node policy {str(path)!r}"
        raw = read_yaml_mapping(path, "node policy", "a mapping of policy keys")
    extra = list(allow_non_private)
    if extra:
        raw["allow_non_private"] = [*(raw.get("allow_non_private") or []), *extra]
    return parse_policy(raw, where)


def node_policy(node_config: Mapping[str, Any]) -> NodePolicy:
    """The policy a node was started with (the default one if none)."""
    text = node_config.get(NC_POLICY)
    if text is None:
        return NodePolicy()
    try:
        raw = yaml.safe_load(str(text))
    except yaml.YAMLError as err:
        raise PolicyError(
            f"node config {NC_POLICY!r} is not valid YAML: {err}"
        ) from None
    return parse_policy(raw, f"node config {NC_POLICY!r}")


def _refuse(rule: str, message: str, fix: str) -> PolicyError:
    return PolicyError(f"node policy refuses ({rule}): {message}; {fix}")


def check_run(policy: NodePolicy, cfg: ExperimentConfig) -> None:
    """Refuse a run the node does not serve, or one that asks for more than the caps."""
    name = cfg.algorithm.name
    if not policy.serves(name):
        what = UPLOADS.get(name, "data this node's policy does not classify")
        if name in NON_PRIVATE or name not in UPLOADS:
            raise _refuse(
                "allow_non_private",
                f"algorithm {name!r} uploads {what}",
                f"a hospital that accepts this opts in with `allow_non_private: "
                f"[{name}]` in its policy file (or --allow-non-private {name})",
            )
        raise _refuse(
            "algorithms",
            f"algorithm {name!r} is not among the algorithms this node serves "
            f"({', '.join(policy.algorithms or ())})",
            "add it to `algorithms` in the node's policy file",
        )
    params = algorithm_params(cfg)
    ratio = getattr(params, "upload_ratio", None)
    if ratio is not None and float(ratio) > policy.max_upload_ratio:
        raise _refuse(
            "max_upload_ratio",
            f"algorithm.params.upload_ratio={float(ratio):g} asks for the statistics "
            f"of more images than the node allows ({policy.max_upload_ratio:g})",
            "lower the run's upload_ratio or raise the node's max_upload_ratio",
        )
    noise = getattr(params, "stats_noise", None)
    if noise is not None and float(noise) < policy.min_stats_noise:
        raise _refuse(
            "min_stats_noise",
            f"algorithm.params.stats_noise={float(noise):g}, less noise on the "
            f"uploaded statistics than the node requires ({policy.min_stats_noise:g})",
            "raise the run's stats_noise or lower the node's min_stats_noise",
        )
    tokens = getattr(params, "tokens", None)
    if name == "fedhd" and tokens is not None and int(tokens) > policy.max_tokens:
        raise _refuse(
            "max_tokens",
            f"algorithm.params.tokens={tokens} synthetic tokens per slide, more than "
            f"the node allows ({policy.max_tokens})",
            "lower the run's tokens or raise the node's max_tokens",
        )
    check_dp(policy, name, params)
    if policy.max_rounds is not None and cfg.train.rounds > policy.max_rounds:
        raise _refuse(
            "max_rounds",
            f"train.rounds={cfg.train.rounds}, more than the node allows "
            f"({policy.max_rounds})",
            "lower train.rounds or raise the node's max_rounds",
        )


def check_dp(policy: NodePolicy, name: str, params: Any) -> None:
    """``require_dp`` and ``max_dp_clip`` for a run of algorithm ``name``."""
    if name not in DP_CLIPPED:
        if policy.require_dp:
            raise _refuse(
                "require_dp",
                f"algorithm {name!r} uploads {UPLOADS.get(name, 'data')} without "
                "client-level differential privacy",
                f"run one of {', '.join(sorted(DP_CLIPPED))}, or lift the node's "
                "require_dp",
            )
        return
    clip = float(params.clip)
    if policy.max_dp_clip is not None and clip > policy.max_dp_clip:
        raise _refuse(
            "max_dp_clip",
            f"algorithm.params.clip={clip:g}, a larger update norm than the node "
            f"allows ({policy.max_dp_clip:g})",
            "lower the run's clip or raise the node's max_dp_clip",
        )
    if policy.require_dp and float(params.noise_multiplier) <= 0:
        raise _refuse(
            "require_dp",
            f"algorithm.params.noise_multiplier={float(params.noise_multiplier):g}: "
            "the run clips but adds no noise (no privacy guarantee)",
            "run with a positive noise_multiplier, or lift the node's require_dp",
        )


def check_secure_aggregation(
    policy: NodePolicy, cfg: ExperimentConfig, mode: str
) -> None:
    """Refuse a run that would upload in the clear from a node whose policy
    requires secure aggregation (``mode``: the run's ``secure-aggregation``)."""
    if not policy.require_secure_aggregation:
        return
    from fedpath.runtime.secagg import ALGORITHMS, RC_MODE

    name = cfg.algorithm.name
    if name not in ALGORITHMS:
        raise _refuse(
            "require_secure_aggregation",
            f"algorithm {name!r} uploads {UPLOADS.get(name, 'data')}, which "
            "secure aggregation cannot carry",
            f"run one of {', '.join(sorted(ALGORITHMS))}, or lift the node's "
            "require_secure_aggregation",
        )
    if mode != "secaggplus":
        raise _refuse(
            "require_secure_aggregation",
            f"the run sends its weights in the clear (Flower run config "
            f"{RC_MODE!r} = {mode!r})",
            "the coordinator starts it with `fedpath flower run --secure-aggregation "
            "secaggplus`",
        )


def plain_upload_refusal(policy: NodePolicy, stage: str) -> PolicyError | None:
    """The refusal of a stage message outside SecAgg+ (None: it may be
    answered): with ``require_secure_aggregation`` only the
    :data:`METRICS_STAGES` (evaluation and validation) are answered in the
    clear."""
    if not policy.require_secure_aggregation or stage in METRICS_STAGES:
        return None
    return _refuse(
        "require_secure_aggregation",
        f"the coordinator asks for stage {stage!r} in the clear",
        "the coordinator starts the run with `fedpath flower run "
        "--secure-aggregation secaggplus`",
    )


def algorithm_params(cfg: ExperimentConfig) -> Any:
    """The run's algorithm params with their defaults (None when it takes none)."""
    from fedpath.registry import ALGORITHMS
    from fedpath.schema import resolve_params

    schema = ALGORITHMS.params(cfg.algorithm.name)
    if schema is None:
        return None
    return resolve_params(schema, cfg.algorithm.params, "algorithm.params")


def check_stage(policy: NodePolicy, cfg: ExperimentConfig, stage: str) -> None:
    """Refuse an unknown stage, and raw-data uploads without the opt-in."""
    if stage not in STAGES:
        raise _refuse(
            "stages",
            f"stage {stage!r} is not one this node knows ({', '.join(STAGES)})",
            "run the same fedpath version on the coordinator and the node",
        )
    name = cfg.algorithm.name
    if stage == RAW_STAGE and name not in policy.allow_non_private:
        raise _refuse(
            "allow_non_private",
            f"stage {stage!r} of algorithm {name!r} uploads {STAGES[stage]}",
            f"opt in with `allow_non_private: [{name}]` in the node's policy file",
        )


def check_reply(
    policy: NodePolicy,
    cfg: ExperimentConfig,
    stage: str,
    reply: Payload,
    image_size: int | None,
) -> None:
    """Inspect what is about to leave the node, whatever the algorithm code did."""
    raw_ok = stage == RAW_STAGE and cfg.algorithm.name in policy.allow_non_private
    for group, arrays in reply.arrays.items():
        for key, arr in arrays.items():
            shape = tuple(int(s) for s in getattr(arr, "shape", ()))
            if image_size and not raw_ok and image_shaped(shape, image_size):
                raise _refuse(
                    "images",
                    f"the {stage!r} reply's array {group}/{key} has shape {shape}, "
                    f"the shape of {image_size} px images",
                    "nothing image-shaped leaves this node unless raw data is "
                    "opted in (allow_non_private)",
                )
            cap = policy.max_statistics
            if stage == "stats" and cap is not None and shape and shape[0] > cap:
                raise _refuse(
                    "max_statistics",
                    f"the statistics upload {group}/{key} holds {shape[0]} rows, "
                    f"more than the node allows ({cap})",
                    "lower the run's upload_ratio or raise max_statistics",
                )
    if stage == "distill":
        sizes = reply.arrays.get("synthetic", {}).get("sizes")
        most = int(max(sizes)) if sizes is not None and len(sizes) else 0
        if most > policy.max_tokens:
            raise _refuse(
                "max_tokens",
                f"a synthetic slide of {most} tokens, more than the node allows "
                f"({policy.max_tokens})",
                "lower the run's tokens or raise max_tokens",
            )


def image_shaped(shape: tuple[int, ...], size: int) -> bool:
    """(..., C, S, S) or (..., S, S, C) with S the images' side: at least three
    dimensions, so a weight matrix of S x S is not mistaken for an image."""
    if len(shape) < 3:
        return False
    return shape[-2:] == (size, size) or (
        shape[-3:-1] == (size, size) and shape[-1] in (1, 3, 4)
    )


def manifest(payload: Payload) -> list[list[Any]]:
    """``[group, name, dtype, shape, bytes]`` of every array of ``payload`` (what
    ``traffic.jsonl`` records; the values themselves are never written)."""
    return [
        [g, k, str(a.dtype), [int(x) for x in a.shape], int(a.nbytes)]
        for g, arrays in payload.arrays.items()
        for k, a in arrays.items()
    ]
