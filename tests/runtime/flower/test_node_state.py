"""A node's client state on its own disk: where it goes, what comes back, what is
kept (the last two rounds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpath.config import load_config
from fedpath.runtime.flower.node_state import load_state, save_state, state_file
from fedpath.types import ClientState


def test_state_round_trips_and_only_the_last_two_rounds_stay(tmp_path: Path) -> None:
    cfg = load_config(None, [f"output_dir={tmp_path / 'out'}"])
    root = tmp_path / "node"
    where = state_file(root, cfg, "hospital_0/c0", "hospital_2", 1, 3)
    assert where.relative_to(root).parts == (
        cfg.name,
        cfg.method,
        "hospital_2",
        "seed1",
        "hospital_0_c0",
        "round3.pt",
    )
    states = {}
    for rnd in (1, 2, 3):
        bn = np.arange(4, dtype=np.float32) * rnd
        states[rnd] = ClientState({"local": {"bn.weight": bn}}, {"alpha": 0.5 * rnd})
        save_state(root, cfg, "hospital_0/c0", "hospital_2", 1, rnd, states[rnd])
    folder = where.parent
    assert sorted(p.name for p in folder.iterdir()) == ["round2.pt", "round3.pt"]
    assert folder.stat().st_mode & 0o777 == 0o700  # the hospital's, nobody else's
    back = load_state(root, cfg, "hospital_0/c0", "hospital_2", 1, 3)
    assert back is not None
    assert back.scalars == {"alpha": 1.5}
    got = back.arrays["local"]["bn.weight"]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, states[3].arrays["local"]["bn.weight"])
    assert load_state(root, cfg, "hospital_0/c0", "hospital_2", 1, 1) is None
    assert load_state(root, cfg, "hospital_1/c0", "hospital_2", 1, 3) is None
