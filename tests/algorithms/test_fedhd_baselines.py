"""The baselines of FedHD's main table: FedHE, DESA, HistoFS, FedDGM-approx.

What they share: smoke runs on tiny synthetic bags, what each client uploads
(never a real patch embedding), and bad options. Each method's own formulas are
tested in its mirrored file (test_fedhe.py, test_desa.py, test_histofs.py,
test_feddgm.py; the styles in tests/mil/test_styles.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedpath.algorithms.base import ClientAlgorithm
from fedpath.algorithms.desa import (
    DESAClient,
)
from fedpath.algorithms.feddgm import FedDGMClient
from fedpath.algorithms.fedhe import FedHEClient
from fedpath.algorithms.histofs import (
    HistoFSClient,
)
from fedpath.config import ConfigError, load_config
from fedpath.data.bags import split_bags
from fedpath.runtime.inprocess import InProcessRun
from fedpath.types import ClientState, Payload
from tests.mil_helpers import (
    SMALL,
    TINY,
    check_clean_run,
    inprocess_run,
    tiny_baseline,
)

HETERO = [
    "algorithm.params.models={hospital_2: transmil}",
    "algorithm.params.model_params={transmil: {hidden: 16, landmarks: 4}}",
]


# ------------------------------------------------------------------ smoke


@pytest.mark.parametrize("algo", sorted(SMALL))
def test_baseline_runs_two_rounds_and_sends_only_its_groups(
    tmp_path: Path, algo: str
) -> None:
    hetero = HETERO if algo != "histofs" else []
    run = inprocess_run(
        tiny_baseline(tmp_path, algo, "train.rounds=2", *hetero), tmp_path
    )
    init = {k: v.copy() for k, v in (run.server.global_weights() or {}).items()}
    rec = run.run()
    clients = rec["evaluation"]["clients"]
    assert len(clients) == 3
    check_clean_run(run, rec, algo)
    if algo == "histofs":  # one global model, averaged
        weights = run.server.global_weights()
        assert weights is not None
        assert any(not np.array_equal(init[k], weights[k]) for k in init)
    else:  # own models; hospital_2 keeps its TransMIL
        arch = {c: s.scalars["architecture"] for c, s in run.states.items()}
        assert arch["hospital_2/c0"] == "transmil" and arch["hospital_0/c0"] == ""


# ------------------------------------------------------------------ payloads


CLIENTS: dict[str, type[ClientAlgorithm[Any]]] = {
    "fedhe": FedHEClient,
    "desa": DESAClient,
    "histofs": HistoFSClient,
    "feddgm": FedDGMClient,
}


def _client_replies(run: InProcessRun, algo: str) -> list[Payload]:
    """hospital_0's replies to every stage of round 1, the server in the loop."""
    params, server, ids = run.run_ctx.params, run.server, sorted(run.by_id)
    states = {c: ClientState() for c in ids}
    replies = []
    for stage in server.stages(1):
        down = server.configure(stage, 1, ids)
        ups = {
            c: CLIENTS[algo](params, run.client_half(c, 1).ctx).handle(
                stage, down[c], states[c]
            )
            for c in ids
        }
        server.aggregate(stage, 1, ups)
        replies.append(ups["hospital_0/c0"])
    return replies


@pytest.mark.parametrize("algo", sorted(SMALL))
def test_no_real_patch_embedding_leaves_a_client(tmp_path: Path, algo: str) -> None:
    run = inprocess_run(tiny_baseline(tmp_path, algo), tmp_path)
    ctx = run.client_half("hospital_0/c0", 1).ctx
    real = torch.cat([b.features for b in split_bags(ctx.data)]).numpy()
    dim = real.shape[1]
    replies = _client_replies(run, algo)
    assert replies
    for reply in replies:
        for group, arrays in reply.arrays.items():
            for name, arr in arrays.items():
                if group == "weights":
                    continue  # model parameters, not data
                if arr.ndim == 2 and arr.shape[1] == dim:
                    assert group == "synthetic", f"{group}/{name} is {arr.shape}"
                    dist = ((arr[:, None, :] - real[None, :, :]) ** 2).sum(-1)
                    assert dist.min() > 1e-6  # no token is a real patch
                    assert len(arr) != len(real) or not np.allclose(arr, real)
                else:  # logits, counts, styles: a few numbers per class or bag
                    assert arr.size <= max(64, 2 * 5 * len(ctx.data)), (group, name)


# ------------------------------------------------------------------ options


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["algorithm.name=histofs", *HETERO], "algorithm.params.models"),
        (["algorithm.name=desa", "algorithm.params.kd_ce=1.5"], "kd_ce"),
        (["algorithm.name=desa", "algorithm.params.reg_anchors=all"], "reg_anchors"),
        (["algorithm.name=fedhe", "algorithm.params.ld_proto=-1"], "ld_proto"),
        (["algorithm.name=feddgm", "algorithm.params.tokens=1"], "tokens"),
        (["algorithm.name=histofs", "algorithm.params.authenticity=2"], "authenticity"),
    ],
)
def test_bad_options_are_refused_naming_the_key(overrides: list[str], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_config(None, [*TINY, *overrides])
