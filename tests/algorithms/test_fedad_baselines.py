"""The self-supervised baselines: one round each through InProcessRun, payloads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.algorithms.elcfs import AMPLITUDE_BANK, ELCFSServer
from fedpath.algorithms.moon import MOON_PREV
from fedpath.algorithms.ssl_common import LOCAL_HEADS, SHARED, WEIGHTS
from fedpath.data.partition import lodo_plan
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.inprocess import InProcessRun
from fedpath.ssl.amplitude import amplitude_mix, low_band_amplitude
from tests.ssl_helpers import ssl_cfg

SSL_METHODS = [
    "fedad",
    "fedavg_ssl",
    "fedprox_ssl",
    "moon",
    "feddis",
    "elcfs",
    "central_simclr",
    "central_supervised",
]


def one_round(tmp_path: Path, algorithm: str, *extra: str) -> InProcessRun:
    cfg = ssl_cfg(tmp_path, algorithm, *extra)
    ds = load_dataset(cfg.data)
    run = InProcessRun(cfg, ds, lodo_plan(ds, ["hospital_2"])[0], 0, tmp_path / "r")
    run.run()
    return run


@pytest.mark.parametrize("algorithm", SSL_METHODS)
def test_one_round_changes_the_encoder(tmp_path: Path, algorithm: str) -> None:
    cfg = ssl_cfg(tmp_path, algorithm)
    ds = load_dataset(cfg.data)
    run = InProcessRun(cfg, ds, lodo_plan(ds, ["hospital_2"])[0], 0, tmp_path / "r")
    before = {k: v.copy() for k, v in run.server.global_weights().items()}
    run.run()
    after = run.server.global_weights()
    assert set(after) == set(before)
    sent = (
        ("encoder.", "classifier.") if algorithm == "central_supervised" else "encoder."
    )
    assert all(k.startswith(sent) for k in after)
    changed = [k for k in before if not np.array_equal(before[k], after[k])]
    assert any(".weight" in k for k in changed)
    assert all(np.isfinite(v).all() for v in after.values())


def test_what_each_method_keeps_and_sends(tmp_path: Path) -> None:
    fedad = one_round(tmp_path / "a", "fedad")
    assert not fedad.server.shared  # FedAD aggregates the extractor only
    assert all(LOCAL_HEADS in s.arrays for s in fedad.states.values())
    simclr = one_round(tmp_path / "b", "fedavg_ssl")
    assert simclr.server.shared and all(
        k.startswith("proj.") for k in simclr.server.shared
    )
    assert not any(s.arrays for s in simclr.states.values())
    dis = one_round(tmp_path / "c", "feddis")
    assert set(dis.server.shared) == {
        k for k in dis.server.shared if k.startswith("inv.")
    }
    for s in dis.states.values():
        assert {k.split(".")[0] for k in s.arrays[LOCAL_HEADS]} == {"spec", "dec"}
    moon = one_round(tmp_path / "d", "moon")
    assert all(MOON_PREV in s.arrays for s in moon.states.values())


def test_moon_second_round_uses_previous_model(tmp_path: Path) -> None:
    import json

    run = one_round(tmp_path, "moon", "train.rounds=2")
    recs = [
        json.loads(x)
        for x in (tmp_path / "r" / "results.jsonl").read_text().splitlines()
        if '"kind": "round"' in x
    ]
    assert recs[0]["fit/con"] == 0.0  # no previous model in round 1
    assert recs[1]["fit/con"] > 0.0
    assert run.cfg.algorithm.params["mu"] == 1.0


def test_elcfs_bank_excludes_own_entries_and_survives_checkpoints(
    tmp_path: Path,
) -> None:
    run = one_round(tmp_path, "elcfs")
    server = run.server
    assert isinstance(server, ELCFSServer)
    clients = sorted(server.bank)
    assert len(clients) == 4
    msgs = server.configure("fit", 2, clients)
    for c in clients:
        bank = msgs[c].arrays[AMPLITUDE_BANK]["low_band"]
        assert len(bank) == sum(len(server.bank[o]) for o in clients if o != c)
        received = {row.tobytes() for row in bank}
        assert not any(row.tobytes() in received for row in server.bank[c])
        assert SHARED in msgs[c].arrays and WEIGHTS in msgs[c].arrays
    twin = ELCFSServer(server.params, server.ctx)
    twin.load_state(server.state())
    assert sorted(twin.bank) == clients
    assert server.stages(2) == ("fit",)


def test_central_upper_bound_pools_every_client(tmp_path: Path) -> None:
    run = one_round(tmp_path, "central_simclr")
    pool = run.server.pool  # type: ignore[attr-defined]
    assert len(pool["images"]) == sum(len(c.train) for c in run.clients)
    assert "labels" not in pool  # SimCLR uploads no labels


def test_amplitude_mix_keeps_phase_and_moves_low_band() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(4, 3, 16, 16, generator=g) * 0.5 + 0.25
    own = low_band_amplitude(x, 0.2)
    assert own.shape == (4, 3, 3, 3)
    same = amplitude_mix(x, own[:1].clone() * 0 + own[:1], g, 0.2)
    assert same.shape == x.shape and float(same.min()) >= 0 and float(same.max()) <= 1
    other = low_band_amplitude(torch.rand(2, 3, 16, 16, generator=g), 0.2) * 3
    mixed = amplitude_mix(x, other, g, 0.2)
    assert not torch.allclose(mixed, x)
    with pytest.raises(ValueError, match="amplitude bank has shape"):
        amplitude_mix(x, torch.zeros(2, 3, 5, 5), g, 0.2)
