"""``with obj:`` closes ``obj`` (fedpath.utils.closing), also when the block raises."""

from __future__ import annotations

import pytest

from fedpath.utils.closing import Closing


class Held(Closing):
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_with_gives_the_object_and_closes_it() -> None:
    with Held() as held:
        assert held.closed == 0
    assert held.closed == 1


def test_an_error_in_the_block_closes_and_propagates() -> None:
    held = Held()
    with pytest.raises(KeyError), held:
        raise KeyError("x")
    assert held.closed == 1


def test_the_base_holds_nothing() -> None:
    with Closing() as plain:
        pass
    plain.close()  # idempotent: nothing to release
