"""The node guard: what a hospital's node will run, and what may leave it.

A coordinator chooses the experiment; a hospital decides what its node serves
(its :class:`~fedpath.runtime.rules.NodePolicy`). Both runtimes call these
checks: the Flower ClientApp on every message, the in-process run on every
reply (with no caps). Every decision about an algorithm is read from its
declared wire facts (:mod:`fedpath.wire`), never from a list of names:

1. **before any work** (:func:`check_run`, also answering the coordinator's
   ``hello``): the run's algorithm must be one the node serves (a declared
   private one, or one opted in with ``allow_non_private``), and the params
   its facts bind to a cap may not ask for more than the caps (share of images
   whose statistics are uploaded, noise on them, synthetic tokens per slide,
   the DP clip), nor the run for more rounds;
2. **per stage** (:func:`check_stage`): a stage that uploads raw data (the
   pooled upper bounds' ``upload``) needs the algorithm's explicit opt-in, and
   an unknown stage is refused;
3. **on the reply** (:func:`check_reply`), whatever the algorithm code did: no
   array shaped like an image of the node's dataset unless raw data was opted
   in, at most ``max_statistics`` statistics rows per upload, at most
   ``max_tokens`` tokens per synthetic slide.

With ``require_secure_aggregation`` the node serves only runs whose coordinator
uses SecAgg+ and algorithms that declare SecAgg+ can carry them
(:func:`check_secure_aggregation`), and answers no stage in the clear but the
evaluation and validation stages (:func:`plain_upload_refusal`, checked by the
node's SecAgg+ mod). Algorithms that declare ``dp_clip`` have every ``fit``
reply clipped on the node (:mod:`fedpath.runtime.flower.central_dp`);
``require_dp`` serves only those, in runs that add noise (:func:`check_dp`).

A refusal raises :class:`~fedpath.runtime.rules.PolicyError` naming the rule
and how the hospital would change it. This module imports neither PyTorch nor
Flower.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedpath.runtime.rules import NodePolicy, PolicyError, refuse
from fedpath.runtime.secagg import RC_MODE, carried
from fedpath.wire import Wire, declared, declaring, describe

if TYPE_CHECKING:
    from fedpath.config import ExperimentConfig
    from fedpath.types import Payload

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

#: cap -> (the type values are compared as, what the run asks for, how to change
#: it), in the order the caps are checked. ``max_*`` caps refuse a larger value,
#: ``min_*`` caps a smaller one.
CAP_RULES: dict[str, tuple[type, str, str]] = {
    "max_upload_ratio": (
        float,
        "algorithm.params.{param}={value:g} asks for the statistics of more images "
        "than the node allows ({limit:g})",
        "lower the run's {param} or raise the node's max_upload_ratio",
    ),
    "min_stats_noise": (
        float,
        "algorithm.params.{param}={value:g}, less noise on the uploaded statistics "
        "than the node requires ({limit:g})",
        "raise the run's {param} or lower the node's min_stats_noise",
    ),
    "max_tokens": (
        int,
        "algorithm.params.{param}={value} synthetic tokens per slide, more than the "
        "node allows ({limit})",
        "lower the run's {param} or raise the node's max_tokens",
    ),
    "max_dp_clip": (
        float,
        "algorithm.params.{param}={value:g}, a larger update norm than the node "
        "allows ({limit:g})",
        "lower the run's {param} or raise the node's max_dp_clip",
    ),
}


def check_run(policy: NodePolicy, cfg: ExperimentConfig) -> None:
    """Refuse a run the node does not serve, or one that asks for more than the caps."""
    name = cfg.algorithm.name
    wire = declared(name)
    if not policy.serves(name):
        if wire is None or not wire.private:
            what = describe(name, "data this node's policy does not classify")
            raise refuse(
                "allow_non_private",
                f"algorithm {name!r} uploads {what}",
                f"a hospital that accepts this opts in with `allow_non_private: "
                f"[{name}]` in its policy file (or --allow-non-private {name})",
            )
        raise refuse(
            "algorithms",
            f"algorithm {name!r} is not among the algorithms this node serves "
            f"({', '.join(policy.algorithms or ())})",
            "add it to `algorithms` in the node's policy file",
        )
    params = algorithm_params(cfg)
    if wire is not None:
        check_caps(policy, wire, params)
    check_dp(policy, name, params)
    if policy.max_rounds is not None and cfg.train.rounds > policy.max_rounds:
        raise refuse(
            "max_rounds",
            f"train.rounds={cfg.train.rounds}, more than the node allows "
            f"({policy.max_rounds})",
            "lower train.rounds or raise the node's max_rounds",
        )


def check_caps(policy: NodePolicy, wire: Wire, params: Any) -> None:
    """Refuse a param above (``max_*``) or below (``min_*``) the policy cap its
    algorithm's wire facts bind it to (:data:`CAP_RULES`)."""
    bound = {cap: param for param, cap in wire.caps.items()}
    for cap, (kind, asks, fix) in CAP_RULES.items():
        limit = getattr(policy, cap)
        param = bound.get(cap)
        raw = None if param is None else getattr(params, param, None)
        if raw is None or limit is None:
            continue
        value = kind(raw)
        if value > limit if cap.startswith("max_") else value < limit:
            raise refuse(
                cap,
                asks.format(param=param, value=value, limit=limit),
                fix.format(param=param),
            )


def check_dp(policy: NodePolicy, name: str, params: Any) -> None:
    """``require_dp`` for a run of algorithm ``name`` (its clip is capped by
    ``max_dp_clip`` through its wire caps, :func:`check_caps`)."""
    wire = declared(name)
    if wire is None or not wire.dp_clip:
        if policy.require_dp:
            raise refuse(
                "require_dp",
                f"algorithm {name!r} uploads {describe(name, 'data')} without "
                "client-level differential privacy",
                f"run one of {', '.join(declaring(lambda w: w.dp_clip))}, or lift "
                "the node's require_dp",
            )
        return
    if policy.require_dp and float(params.noise_multiplier) <= 0:
        raise refuse(
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
    name = cfg.algorithm.name
    wire = declared(name)
    if wire is None or wire.secagg is None:
        raise refuse(
            "require_secure_aggregation",
            f"algorithm {name!r} uploads {describe(name, 'data')}, which "
            "secure aggregation cannot carry",
            f"run one of {', '.join(carried())}, or lift the node's "
            "require_secure_aggregation",
        )
    if mode != "secaggplus":
        raise refuse(
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
    return refuse(
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
        raise refuse(
            "stages",
            f"stage {stage!r} is not one this node knows ({', '.join(STAGES)})",
            "run the same fedpath version on the coordinator and the node",
        )
    name = cfg.algorithm.name
    if stage == RAW_STAGE and name not in policy.allow_non_private:
        raise refuse(
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
                raise refuse(
                    "images",
                    f"the {stage!r} reply's array {group}/{key} has shape {shape}, "
                    f"the shape of {image_size} px images",
                    "nothing image-shaped leaves this node unless raw data is "
                    "opted in (allow_non_private)",
                )
            cap = policy.max_statistics
            if stage == "stats" and cap is not None and shape and shape[0] > cap:
                raise refuse(
                    "max_statistics",
                    f"the statistics upload {group}/{key} holds {shape[0]} rows, "
                    f"more than the node allows ({cap})",
                    "lower the run's upload_ratio or raise max_statistics",
                )
    if stage == "distill":
        sizes = reply.arrays.get("synthetic", {}).get("sizes")
        most = int(max(sizes)) if sizes is not None and len(sizes) else 0
        if most > policy.max_tokens:
            raise refuse(
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


def non_private_upload(name: str) -> str | None:
    """What ``name`` uploads if it declares raw data (None: it does not), for
    the node's warning when its policy opted in to it."""
    wire = declared(name)
    return None if wire is None or wire.private else wire.sends


def audit_policy(name: str) -> NodePolicy:
    """The policy of the in-process run's reply check: no caps, and raw data
    allowed only from an algorithm that declares it uploads raw data."""
    raw = non_private_upload(name) is not None
    return NodePolicy(allow_non_private=(name,) if raw else (), max_tokens=2**62)
