"""HistoFS (FedHD's baseline): one architecture, and with ``spaces: adapt`` weights
averaged within groups of one architecture in one space."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpath.algorithms.histofs import HistoFSServer
from fedpath.algorithms.mil_common import arrays_to_spaced
from fedpath.config import ConfigError
from fedpath.params.mil_baselines import HistoFSParams
from fedpath.types import Payload
from tests.mil_helpers import inprocess_run, tiny_baseline


def test_histofs_refuses_heterogeneous_models_in_code() -> None:
    with pytest.raises(ConfigError, match="one architecture"):
        HistoFSParams(models={"hospital_0": "transmil"})


def test_histofs_averages_weights_within_groups_by_slide_count(
    tmp_path: Path,
) -> None:
    run = inprocess_run(tiny_baseline(tmp_path, "histofs"), tmp_path)
    server = HistoFSServer(HistoFSParams(spaces="adapt"), run.server.ctx)
    ids = run.server.ctx.client_ids
    a, b, c = ids
    spec = {a: ("uni", 0.0), b: ("uni", 1.0), c: ("r50", 2.0)}
    styles = {
        cid: Payload(
            {"styles": {"styles": np.full((2, 2), v, np.float32)}},
            {"num_examples": 1, "embedding_space": s, "dim": 4},
        )
        for cid, (s, v) in spec.items()
    }
    server.aggregate("stats", 1, styles)
    first = server.configure("fit", 1, ids)
    for cid in ids:  # the others' styles, per space; no weights yet
        parts = dict(arrays_to_spaced(first[cid].arrays["pool"], first[cid].scalars))
        assert sorted(parts) == sorted({spec[o][0] for o in ids if o != cid})
        assert "weights" not in first[cid].arrays
    w = {a: 1.0, b: 4.0, c: 7.0}
    n = {a: 1, b: 3, c: 2}
    replies = {
        cid: Payload(
            {"weights": {"w": np.full(3, w[cid], np.float32)}},
            {"num_examples": n[cid], "group": "abmil@" + spec[cid][0], "loss": 1.0},
        )
        for cid in ids
    }
    out = server.aggregate("fit", 1, replies)
    assert out["groups"] == 2
    uni = server.evaluate_payload(a).arrays["weights"]["w"]
    assert np.allclose(uni, (1.0 * 1 + 4.0 * 3) / 4)  # slide-count weighted
    assert np.array_equal(server.evaluate_payload(b).arrays["weights"]["w"], uni)
    assert np.allclose(server.evaluate_payload(c).arrays["weights"]["w"], 7.0)
    nxt = server.configure("fit", 2, ids)
    assert "pool" not in nxt[a].arrays  # styles only once
    assert np.array_equal(nxt[a].arrays["weights"]["w"], uni)
    # groups, members, styles and spaces survive a checkpoint
    other = HistoFSServer(HistoFSParams(spaces="adapt"), run.server.ctx)
    other.load_state(server.state())
    assert other.groups.member == server.groups.member
    assert other.spaces == server.spaces
    for cid in ids:
        assert np.array_equal(
            other.evaluate_payload(cid).arrays["weights"]["w"],
            server.evaluate_payload(cid).arrays["weights"]["w"],
        )
        assert np.array_equal(other.styles[cid], server.styles[cid])
