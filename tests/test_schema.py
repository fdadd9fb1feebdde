"""Declarative field constraints and the typed-dataclass loader (fedpath.schema)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated

import pytest

from fedpath.schema import (
    Check,
    Checked,
    ConfigError,
    Ge,
    Gt,
    Probability,
    Range,
    from_mapping,
    require,
)


@dataclass(frozen=True)
class Inner(Checked):
    config_section = "algorithm.params"

    mu: Annotated[float, Ge(0)] = 0.0
    k: Annotated[int, Gt(1)] = 2
    q: Annotated[float, Range(0, 1, lo_open=True)] = 0.7
    p: Annotated[float, Probability] = 0.5
    width: Annotated[int | None, Ge(1)] = None
    cs: Annotated[list[float], Check("a non-empty list", lambda v: len(v) > 0)] = field(
        default_factory=lambda: [1.0]
    )
    lo: float = 0.0
    hi: float = 1.0

    def validate(self) -> None:
        require(self.lo <= self.hi, "lo", "a number <= hi", self.lo)


@dataclass(frozen=True)
class Outer:
    inner: Inner = field(default_factory=Inner)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mu": -1.0}, "'algorithm.params.mu': expected a number >= 0, got -1.0"),
        ({"k": 1}, "'algorithm.params.k': expected an integer > 1, got 1"),
        ({"q": 0.0}, r"'algorithm.params.q': expected a number in \(0, 1\], got 0.0"),
        ({"p": 1.5}, r"'algorithm.params.p': expected a number in \[0, 1\], got 1.5"),
        ({"width": 0}, "'algorithm.params.width': expected an integer >= 1 or null"),
        ({"cs": []}, "'algorithm.params.cs': expected a non-empty list, got \\[\\]"),
        ({"lo": 2.0}, "'algorithm.params.lo': expected a number <= hi, got 2.0"),
        ({"mu": math.nan}, "'algorithm.params.mu': expected a number >= 0, got nan"),
        ({"mu": math.inf}, "'algorithm.params.mu': expected a number >= 0, got inf"),
    ],
)
def test_constructing_checks_constraints_naming_the_key(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Inner(**kwargs)  # type: ignore[arg-type]


def test_valid_values_and_null_pass() -> None:
    ok = Inner(mu=0.0, k=2, q=1.0, p=0.0, width=None, cs=[0.5])
    assert ok.q == 1.0 and ok.width is None


def test_from_mapping_names_the_key_under_the_section_it_was_read_from() -> None:
    with pytest.raises(ConfigError, match="'outer.inner.mu': expected a number >= 0"):
        from_mapping(Outer, {"inner": {"mu": -1}}, "outer")
    with pytest.raises(ConfigError, match="^config key 'inner.lo': expected a number"):
        from_mapping(Outer, {"inner": {"lo": 3.0}}, "")
    with pytest.raises(ConfigError, match="unknown config key 'x.inner.nope'"):
        from_mapping(Outer, {"inner": {"nope": 1}}, "x")
    assert from_mapping(Outer, {"inner": {"mu": 2}}, "x").inner.mu == 2.0
