"""A hospital's rules for its node: :class:`NodePolicy`, as the node receives it.

The policy is set when the node starts (``fedpath flower supernode --policy
FILE``, read by :mod:`fedpath.deploy.policy`) and travels in the node config as
one line of YAML (:data:`NC_POLICY`), never in the coordinator's run config.
The node guard (:mod:`fedpath.runtime.guard`) enforces it on every message.
Which algorithms it serves by default, and what each one's caps bound, comes
from each algorithm's declared wire facts (:mod:`fedpath.wire`).

This module imports neither PyTorch nor Flower.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import yaml

from fedpath.registry import ALGORITHMS
from fedpath.schema import Checked, ConfigError, Ge, Gt, Range, from_mapping
from fedpath.utils.yaml_io import DuplicateKeyError, strict_load, yaml_problem
from fedpath.wire import declared, describe

#: node-config key holding the policy (YAML text of the mapping)
NC_POLICY = "policy"


class PolicyError(ConfigError):
    """The node's policy refuses the run, a stage or a reply (names the rule)."""


def refuse(rule: str, message: str, fix: str) -> PolicyError:
    """The refusal by ``rule``, saying what was asked and how to change it."""
    return PolicyError(f"node policy refuses ({rule}): {message}; {fix}")


@dataclass(frozen=True)
class NodePolicy(Checked):
    """A hospital's rules for its node (:mod:`fedpath.deploy.policy` documents
    the policy file)."""

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
    #: weights leave this node only masked by SecAgg+ (:mod:`.guard`)
    require_secure_aggregation: bool = False
    #: the largest dp_fedavg clip (L2 norm of one update) the node accepts
    max_dp_clip: Annotated[float, Gt(0)] | None = None
    #: serve only client-level DP runs (dp_fedavg with noise_multiplier > 0)
    require_dp: bool = False
    #: let the class probabilities and labels of the validation slides leave
    #: (temperature scaling and the operating point, ``partition.validation``)
    share_validation_predictions: bool = False

    def serves(self, name: str) -> bool:
        """Whether the node runs ``name``: an opt-in always; otherwise it must
        declare wire facts without raw data, and be listed if a list is set."""
        if name in self.allow_non_private:
            return True
        wire = declared(name)
        if wire is None or not wire.private:
            return False
        return self.algorithms is None or name in self.algorithms

    def summary(self) -> str:
        """One line for the node's log."""
        known = ALGORITHMS.names()
        served = [n for n in known if self.serves(n)]
        extra = sorted(set(self.allow_non_private) - set(known))
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
                f"{n} uploads {describe(n, 'unknown data')}" for n in opted
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
        unknown = [n for n in getattr(policy, key) or () if n not in ALGORITHMS]
        if unknown:
            raise ConfigError(
                f"{where}: {key} names unknown algorithm(s) {unknown}; known: "
                f"{', '.join(ALGORITHMS.names())} (or a plugin's registered name)"
            )
    return policy


def node_policy(node_config: Mapping[str, Any]) -> NodePolicy:
    """The policy a node was started with (the default one if none)."""
    text = node_config.get(NC_POLICY)
    if text is None:
        return NodePolicy()
    try:
        raw = strict_load(str(text))
    except DuplicateKeyError as err:
        raise PolicyError(f"node config {NC_POLICY!r}: {err}") from None
    except yaml.YAMLError as err:
        # one line with its line and column, never PyYAML's excerpt of the
        # text: this error travels from the node to the coordinator
        raise PolicyError(
            f"node config {NC_POLICY!r} is not valid YAML: {yaml_problem(err)}"
        ) from None
    except RecursionError:
        raise PolicyError(
            f"node config {NC_POLICY!r} is not valid YAML: nested too deeply"
        ) from None
    return parse_policy(raw, f"node config {NC_POLICY!r}")
