"""The MIL models' params: TransMIL's kernel and head count are checked."""

from __future__ import annotations

import pytest

from fedpath.params.mil import TransMILParams
from fedpath.schema import ConfigError


def test_transmil_kernel_and_heads() -> None:
    assert TransMILParams(residual_kernel=0).residual_kernel == 0
    with pytest.raises(ConfigError, match="an odd integer >= 1, or 0"):
        TransMILParams(residual_kernel=4)
    with pytest.raises(ConfigError, match=r"a divisor of hidden \(128\)"):
        TransMILParams(heads=3)
