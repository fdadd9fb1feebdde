"""The node side of SecAgg+: the reply becomes the ``FitRes`` that
``secaggplus_mod`` masks (float64 floating entries, the weight, the index), and
what it cannot carry is refused before anything is masked. The protocol end to
end: tests/runtime/test_secagg.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedpath.config import ConfigError
from fedpath.runtime.flower.records import SCALARS, RecordError
from fedpath.runtime.flower.secagg import (
    FITRES_COUNT,
    FITRES_PARAMETERS,
    INDEX,
    fitres_content,
)
from fedpath.types import Payload


def _reply(n: Any = 12) -> Payload:
    weights: dict[str, np.ndarray] = {
        "conv.weight": np.array([[0.5, -1.25]], np.float32),
        "bn.num_batches_tracked": np.array(3, np.int64),
    }
    return Payload({"weights": weights}, {"num_examples": n, "loss": 0.75})


def test_floating_entries_go_as_float64_with_their_index() -> None:
    out = fitres_content(_reply(), "h/c0", clipping_range=8.0, max_weight=100.0)
    params = out.array_records[FITRES_PARAMETERS]
    assert list(params) == ["conv.weight"]  # integers stay out of the masked sum
    sent = params["conv.weight"].numpy()
    assert sent.dtype == np.float64
    np.testing.assert_array_equal(sent, [[0.5, -1.25]])
    assert out.metric_records[FITRES_COUNT]["num_examples"] == 12
    index = out.config_records[INDEX]
    assert index["names"] == ["conv.weight"]
    assert index["shapes"] == ["1,2"] and index["dtypes"] == ["<f4"]
    # the other scalars travel in the clear, the count only inside the sum
    assert dict(out.config_records[SCALARS]) == {"loss": 0.75}


def test_equal_weights_send_one() -> None:
    out = fitres_content(_reply(), "h/c0", 8.0, 100.0, equal=True)
    assert out.metric_records[FITRES_COUNT]["num_examples"] == 1


@pytest.mark.parametrize(
    ("reply", "clip", "max_weight", "error", "match"),
    [
        (_reply(), 1.0, 100.0, ConfigError, "outside secagg-clipping-range=1"),
        (_reply(n=500), 8.0, 100.0, ConfigError, "more than secagg-max-weight=100"),
        (_reply(n=0), 8.0, 100.0, RecordError, "without a positive num_examples"),
        (_reply(n=True), 8.0, 100.0, RecordError, "without a positive num_examples"),
        (Payload({"a": {}, "b": {}}), 8.0, 100.0, RecordError, "one group of weights"),
    ],
)
def test_what_the_mask_cannot_carry_is_refused(
    reply: Payload,
    clip: float,
    max_weight: float,
    error: type[Exception],
    match: str,
) -> None:
    with pytest.raises(error, match=match):
        fitres_content(reply, "h/c0", clip, max_weight)


def test_a_non_finite_entry_is_refused() -> None:
    reply = _reply()
    reply.arrays["weights"]["conv.weight"][0, 0] = np.nan
    with pytest.raises(ConfigError, match="reaches"):
        fitres_content(reply, "h/c0", 8.0, 100.0)
