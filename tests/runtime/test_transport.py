"""The transport contract of the round loop: :mod:`fedpath.runtime.transport`.

Both runtimes' transports must offer every member of :class:`Transport` with
the same parameters, so the loop can call either; and each says where the
client states live.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from fedpath.runtime.flower.transport import FlowerTransport
from fedpath.runtime.inprocess import LocalTransport
from fedpath.runtime.transport import Transport

MEMBERS = [
    "begin_round",
    "exchange",
    "client_metrics",
    "validation_metrics",
    "validation_predictions",
]


def _params(fn: object) -> list[str]:
    return list(inspect.signature(fn).parameters)  # type: ignore[arg-type]


def test_the_protocol_is_what_the_round_loop_calls() -> None:
    import fedpath.runtime.evaluator as evaluator
    import fedpath.runtime.loop as loop

    own = [
        n
        for n, v in vars(Transport).items()
        if inspect.isfunction(v) and not n.startswith("_")
    ]
    assert sorted(own) == sorted(MEMBERS)
    assert "keeps_client_states" in Transport.__annotations__
    # no member the loop and its evaluation never call
    used = inspect.getsource(loop) + inspect.getsource(evaluator)
    for name in [*MEMBERS, "keeps_client_states"]:
        assert f"transport.{name}" in used, name


@pytest.mark.parametrize(
    ("cls", "keeps"), [(LocalTransport, True), (FlowerTransport, False)]
)
def test_each_runtime_transport_meets_the_protocol(cls: Any, keeps: bool) -> None:
    assert cls.keeps_client_states is keeps
    for name in MEMBERS:
        assert _params(getattr(cls, name)) == _params(getattr(Transport, name)), name
