from __future__ import annotations

import numpy as np
import pytest

from fedpath.algorithms.aggregation import weighted_average


def random_states(k: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "conv.weight": rng.normal(size=(4, 3, 3, 3)).astype(np.float32),
            "bn.running_mean": rng.normal(size=4).astype(np.float32),
            "bn.running_var": rng.uniform(0.5, 2, size=4).astype(np.float32),
            "bn.num_batches_tracked": np.asarray(rng.integers(0, 100), dtype=np.int64),
        }
        for _ in range(k)
    ]


def test_matches_numpy_weighted_average() -> None:
    states = random_states(5)
    w = [10, 3, 7, 1, 30]
    out = weighted_average(states, w)
    for key in ("conv.weight", "bn.running_mean", "bn.running_var"):
        ref = np.average(np.stack([s[key] for s in states]), axis=0, weights=w)
        np.testing.assert_allclose(out[key], ref, rtol=1e-6)
        assert out[key].dtype == np.float32
    assert out["bn.num_batches_tracked"] == max(
        int(s["bn.num_batches_tracked"]) for s in states
    )


def test_pooled_variance_equals_variance_of_union() -> None:
    rng = np.random.default_rng(1)
    datasets = [
        rng.normal(loc=m, scale=s, size=(n, 4))
        for m, s, n in ((0, 1, 50), (3, 0.5, 200), (-2, 2, 80))
    ]
    states = [
        {"bn.running_mean": d.mean(0), "bn.running_var": d.var(0)} for d in datasets
    ]
    out = weighted_average(states, [len(d) for d in datasets], bn_buffers="pooled")
    union = np.concatenate(datasets)
    np.testing.assert_allclose(out["bn.running_mean"], union.mean(0), rtol=1e-10)
    np.testing.assert_allclose(out["bn.running_var"], union.var(0), rtol=1e-10)
    plain = weighted_average(states, [len(d) for d in datasets])
    assert np.all(plain["bn.running_var"] < out["bn.running_var"])


def test_subset_of_keys_and_errors() -> None:
    states = random_states(2)
    out = weighted_average(states, [1, 1], keys=["conv.weight"])
    assert set(out) == {"conv.weight"}
    with pytest.raises(ValueError, match="2 states but 3 weights"):
        weighted_average(states, [1, 2, 3])
    with pytest.raises(ValueError, match="positive sum"):
        weighted_average(states, [0, 0])
    with pytest.raises(ValueError, match="no client states"):
        weighted_average([], [])
    bad = [states[0], {**states[1], "conv.weight": np.zeros((2, 2), np.float32)}]
    with pytest.raises(ValueError, match="entry 'conv.weight' has shape"):
        weighted_average(bad, [1, 1])
    with pytest.raises(ValueError, match="client 1 lacks entries"):
        weighted_average([states[0], {"conv.weight": states[1]["conv.weight"]}], [1, 1])
