"""The node policy: what a hospital's node will run, and what may leave it.

A coordinator chooses the experiment; a hospital decides what its node serves.
The policy is set when the node starts (``fedpath flower supernode --policy
FILE``, plus ``--allow-non-private NAME``): this module reads that file into a
:class:`~fedpath.runtime.rules.NodePolicy`, which travels in the node config
(never in the coordinator's run config) and is enforced on the node by the node
guard (:mod:`fedpath.runtime.guard`), for every message:

1. **before any work** (``check_run``, also answering the coordinator's
   ``hello``): the run's algorithm must be one the node serves, and the run may
   not ask for more than the caps (share of images whose statistics are
   uploaded, synthetic tokens per slide, rounds);
2. **per stage** (``check_stage``): a stage that uploads raw data (the
   pooled upper bounds' ``upload``) needs the algorithm's explicit opt-in, and
   an unknown stage is refused;
3. **on the reply** (``check_reply``), whatever the algorithm code did: no
   array shaped like an image of the node's dataset unless raw data was opted
   in, at most ``max_statistics`` statistics rows per upload, at most
   ``max_tokens`` tokens per synthetic slide.

A refusal raises :class:`~fedpath.runtime.rules.PolicyError` naming the rule
and how the hospital would change it; the node turns it into an error reply, so
the coordinator's log says why, instead of waiting for a silent node.

What an algorithm sends is what it declares where it is registered (its wire
facts, :mod:`fedpath.wire`): the default policy serves every algorithm whose
stages send weights, statistics, synthetic data or metrics, and refuses the
non-private ones (a stage that sends raw data: images, labels or real
embeddings) until the policy names them in ``allow_non_private``; an algorithm
that declares nothing counts as non-private. The caps bind the params each
algorithm's facts name (``Wire.caps``). A policy file::

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
at the ``hello`` otherwise), only the algorithms that declare SecAgg+ can carry
them (``Wire.secagg``, :func:`fedpath.runtime.secagg.carried`), and answers no
stage in the clear but the evaluation and validation stages (metrics; validation
predictions only with ``share_validation_predictions``): a plain ``fit``
message gets an error reply (``plain_upload_refusal``, checked by the node's
SecAgg+ mod).

Client-level DP (the algorithms that declare ``Wire.dp_clip``: ``dp_fedavg``):
the node clips every ``fit`` reply with Flower's ``fixedclipping_mod`` to the
run's ``algorithm.params.clip`` (:mod:`fedpath.runtime.flower.central_dp`).
``max_dp_clip`` caps that clip, i.e. how far one round's upload may move the
model; ``require_dp`` serves only those algorithms, in runs whose
``noise_multiplier`` is positive. The noise itself is added by the coordinator,
so the node checks the run declares it; the clip is what the node enforces.

This module imports neither PyTorch nor Flower: ``fedpath flower supernode``
checks and prints the policy before it starts anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fedpath.runtime.rules import NodePolicy, parse_policy


def load_policy(path: Path | None, allow_non_private: Iterable[str] = ()) -> NodePolicy:
    """The policy file (or the default policy), plus opt-ins from the command line."""
    from fedpath.utils.yaml_io import read_yaml_mapping

    raw: dict[str, Any] = {}
    where = "the default node policy"
    if path is not None:
        where = f"node policy {str(path)!r}"
        raw = read_yaml_mapping(path, "node policy", "a mapping of policy keys")
    extra = list(allow_non_private)
    listed = raw.get("allow_non_private")
    # a value that is not a list is left as written, so the error names the key
    # instead of a string's letters being read as algorithm names
    if extra and (listed is None or isinstance(listed, list)):
        raw["allow_non_private"] = [*(listed or []), *extra]
    return parse_policy(raw, where)
