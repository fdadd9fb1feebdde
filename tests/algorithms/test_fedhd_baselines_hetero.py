"""FedHD's baselines with a different feature extractor per client (``spaces: adapt``).

Runs of DESA, FedDGM-approx and HistoFS across three spaces, refusals without the
option, and no real patch embedding leaving a client in any space. The methods'
own pieces (DESA's per-space anchors, HistoFS's groups and style mapping) are
tested in test_desa.py, test_histofs.py and tests/mil/test_styles.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedpath.algorithms.group_average import group_of
from fedpath.algorithms.histofs import HistoFSServer
from fedpath.algorithms.mil_spaces import ADAPTERS
from fedpath.config import ConfigError, load_config
from fedpath.mil.adapters import AdaptedMIL, space_key
from fedpath.params.mil_baselines import HistoFSParams
from fedpath.types import Payload
from tests.mil_helpers import (
    ADAPT,
    OWN,
    SPACES,
    TINY,
    check_clean_run,
    inprocess_run,
    tiny_baseline,
)

METHODS = ("desa", "feddgm", "histofs")


@pytest.mark.parametrize("algo", METHODS)
def test_baseline_trains_two_rounds_across_three_spaces(
    tmp_path: Path, algo: str
) -> None:
    run = inprocess_run(
        tiny_baseline(tmp_path, algo, "train.rounds=2", *ADAPT), tmp_path
    )
    rec = run.run()
    clients = rec["evaluation"]["clients"]
    assert sorted(clients) == sorted(OWN)
    check_clean_run(run, rec, algo)
    for cid, (_, d) in OWN.items():
        state = run.states[cid]
        # the deployed model is the client's own architecture in its own space
        model = run.client_half(cid, 2).deployed_model(
            run.server.evaluate_payload(cid), state
        )
        assert model.in_dim == d and not isinstance(model, AdaptedMIL)
        if algo == "histofs":
            continue
        foreign = {s: dd for c, (s, dd) in OWN.items() if c != cid}
        adapters = state.arrays[ADAPTERS]
        for s, dd in foreign.items():  # one adapter per foreign space
            assert adapters[f"{space_key(s)}.1.weight"].shape == (d, dd)
    if algo == "histofs":  # three clients, three (architecture, space) groups
        server = run.server
        assert isinstance(server, HistoFSServer)
        assert sorted(server.groups.groups) == sorted(
            group_of("transmil" if c == "hospital_2/c0" else "", s)
            for c, (s, _) in OWN.items()
        )
        assert run.server.global_weights() is None


@pytest.mark.parametrize("algo", METHODS)
def test_differing_spaces_without_the_option_are_refused(
    tmp_path: Path, algo: str
) -> None:
    with pytest.raises(ConfigError, match=r"spaces"):
        cfg = tiny_baseline(tmp_path, algo, SPACES)
        inprocess_run(cfg, tmp_path).run()


def test_histofs_refuses_per_client_extractors_at_load() -> None:
    with pytest.raises(ConfigError, match="algorithm.params.features"):
        load_config(None, [*TINY, "algorithm.name=histofs", SPACES])
    HistoFSParams(spaces="adapt", models={"hospital_0": "transmil"})  # accepted


def test_no_real_patch_embedding_leaves_a_client_in_any_space(
    tmp_path: Path,
) -> None:
    from fedpath.tasks.bags import BagTask

    for algo in ("desa", "feddgm"):
        run = inprocess_run(
            tiny_baseline(tmp_path / algo, algo, *ADAPT), tmp_path / algo
        )
        task = run.task
        assert isinstance(task, BagTask)
        reals = []
        for cl in run.clients:
            for split in (cl.train, cl.test):
                assert split is not None
                for space in {s for s, _ in OWN.values()}:
                    reals += [b.features.numpy() for b in task.slides(split, space)]
        run.run()
        for line in (run.run_dir / "traffic.jsonl").open():
            r = json.loads(line)
            sent = {g for g, *_ in r["sent"] or []}
            assert sent <= {"synthetic", "anchor_logits"}, sent
        syn = {
            cid: run.client_half(cid, 1).handle("distill", Payload(), run.states[cid])
            for cid in OWN
        }
        for cid, reply in syn.items():
            tokens = reply.arrays["synthetic"]["features"]
            assert tokens.shape[1] == OWN[cid][1]
            for real in reals:
                if real.shape[1] == tokens.shape[1]:
                    dist = ((tokens[:, None] - real[None]) ** 2).sum(-1)
                    assert dist.min() > 1e-6
