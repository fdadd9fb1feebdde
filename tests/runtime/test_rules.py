"""A hospital's rules as its node holds them: which algorithms the default
policy serves (from their declared wire facts), the one-line log summary, and
the node-config round trip."""

from __future__ import annotations

import pytest

from fedpath.config import ConfigError
from fedpath.registry import ALGORITHMS
from fedpath.runtime.rules import (
    NC_POLICY,
    NodePolicy,
    PolicyError,
    node_policy,
    parse_policy,
)
from fedpath.wire import declared

#: the pooled upper bounds: they upload raw data, so no node serves them unasked
POOLED = ("central_supervised", "central_simclr", "pooled_mil")


def test_default_policy_serves_what_declares_no_raw_data() -> None:
    p = NodePolicy()
    for name in ALGORITHMS.names():
        wire = declared(name)
        assert wire is not None, f"{name} declares no wire facts"
        assert p.serves(name) is wire.private, name
    assert not any(p.serves(n) for n in POOLED)
    assert p.serves("fedavg") and p.serves("fedhd") and p.serves("dp_fedavg")
    assert not p.serves("someones_plugin")  # declares nothing: non-private
    opted = parse_policy({"allow_non_private": ["central_supervised"]}, "x")
    assert opted.serves("central_supervised") and not opted.serves("pooled_mil")
    only = parse_policy({"algorithms": ["fedavg"]}, "x")
    assert only.serves("fedavg") and not only.serves("fedstain")


def test_summary_lists_what_is_served_and_the_opt_ins() -> None:
    text = NodePolicy(allow_non_private=("pooled_mil",)).summary()
    served = text.split("serves ", 1)[1].split(";", 1)[0].split(", ")
    assert served == [n for n in ALGORITHMS.names() if n not in POOLED[:2]]
    assert "NON-PRIVATE algorithms opted in: pooled_mil uploads every real" in text
    assert "max_dp_clip" not in text
    assert "max_dp_clip 0.5" in NodePolicy(max_dp_clip=0.5).summary()


def test_node_config_round_trip_and_errors() -> None:
    p = parse_policy({"algorithms": ["fedavg"], "max_rounds": 3}, "x")
    assert "\n" not in p.to_yaml() and node_policy({NC_POLICY: p.to_yaml()}) == p
    assert node_policy({}) == NodePolicy()
    with pytest.raises(PolicyError, match="is not valid YAML"):
        node_policy({NC_POLICY: "{algorithms: [fedavg"})
    with pytest.raises(ConfigError, match=r"x: allow_non_private names unknown"):
        parse_policy({"allow_non_private": ["nope"]}, "x")
    with pytest.raises(ConfigError, match="x: expected a mapping of policy keys"):
        parse_policy([1], "x")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "{algorithms: [fedavg], secret_word_xyz: [",
            r"not valid YAML: .*\(line 1, column \d+\)$",
        ),
        (
            "max_rounds: 3\nmax_rounds: 4\nsecret_word_xyz: 1",
            "key 'max_rounds' is given twice",
        ),
        ("[" * 5000, "not valid YAML"),
    ],
)
def test_node_config_errors_are_one_line_without_the_text(
    text: str, expected: str
) -> None:
    """The error travels to the coordinator: its place, never the policy text."""
    with pytest.raises(PolicyError, match=expected) as err:
        node_policy({NC_POLICY: text})
    message = str(err.value)
    assert "\n" not in message and "secret_word_xyz" not in message
