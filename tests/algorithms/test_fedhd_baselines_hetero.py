"""FedHD's baselines with a different feature extractor per client (``spaces: adapt``).

DESA (anchors mixed within each space, adapters for the foreign ones), FedDGM-approx
(samples sent per space, adapters) and HistoFS (weights averaged within groups of
one architecture in one space, foreign styles mapped into the receiver's space).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.algorithms.desa import ANCHORS, DESAServer
from fedpath.algorithms.histofs import (
    HistoFSServer,
    group_of,
    map_styles,
    style_moments,
)
from fedpath.algorithms.mil_common import arrays_to_spaced, bags_to_arrays
from fedpath.algorithms.mil_spaces import ADAPTERS
from fedpath.config import ConfigError, load_config
from fedpath.mil.adapters import AdaptedMIL, space_key
from fedpath.mil.bags import SlideBag
from fedpath.params.mil_baselines import DESAParams, HistoFSParams
from fedpath.types import Payload
from tests.algorithms.test_fedhd import TINY, _run
from tests.algorithms.test_fedhd_baselines import SMALL, check_clean_run
from tests.algorithms.test_fedhd_hetero import OWN, SPACES

ADAPT = [
    SPACES,
    "algorithm.params.spaces=adapt",
    "algorithm.params.models={hospital_2: transmil}",
    "algorithm.params.model_params={transmil: {hidden: 16, landmarks: 4}}",
]
METHODS = ("desa", "feddgm", "histofs")


def _cfg(tmp_path: Path, algo: str, *extra: str):  # type: ignore[no-untyped-def]
    return load_config(
        None,
        [f"output_dir={tmp_path}", *TINY, f"algorithm.name={algo}", *SMALL[algo],
         *extra],
    )  # fmt: skip


@pytest.mark.parametrize("algo", METHODS)
def test_baseline_trains_two_rounds_across_three_spaces(
    tmp_path: Path, algo: str
) -> None:
    run = _run(_cfg(tmp_path, algo, "train.rounds=2", *ADAPT), tmp_path)
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
        assert sorted(server.groups) == sorted(
            group_of("transmil" if c == "hospital_2/c0" else "", s)
            for c, (s, _) in OWN.items()
        )
        assert run.server.global_weights() is None


@pytest.mark.parametrize("algo", METHODS)
def test_differing_spaces_without_the_option_are_refused(
    tmp_path: Path, algo: str
) -> None:
    with pytest.raises(ConfigError, match=r"spaces"):
        cfg = _cfg(tmp_path, algo, SPACES)
        _run(cfg, tmp_path).run()


def test_histofs_refuses_per_client_extractors_at_load() -> None:
    with pytest.raises(ConfigError, match="algorithm.params.features"):
        load_config(None, [*TINY, "algorithm.name=histofs", SPACES])
    HistoFSParams(spaces="adapt", models={"hospital_0": "transmil"})  # accepted


def _distill_replies(spec: dict[str, tuple[str, int, float]]) -> dict[str, Payload]:
    """One class-0 and one class-1 anchor per client, every token ``value``."""
    out = {}
    for cid, (space, d, value) in spec.items():
        bags = [SlideBag(f"{cid}-{y}", torch.full((3, d), value + y), y, "h")
                for y in (0, 1)]  # fmt: skip
        out[cid] = Payload(
            {"synthetic": bags_to_arrays(bags)},
            {"embedding_space": space, "dim": d, "num_slides": 2},
        )
    return out


def test_desa_mixes_anchors_within_each_space_only(tmp_path: Path) -> None:
    run = _run(_cfg(tmp_path, "desa"), tmp_path)
    server = DESAServer(DESAParams(spaces="adapt"), run.server.ctx)
    spec = {"a": ("uni", 3, 1.0), "b": ("uni", 3, 5.0), "c": ("r50", 5, 10.0)}
    scalars = server.aggregate("distill", 1, _distill_replies(spec))
    assert scalars["anchors"] == 4  # 2 classes x (uni mixed, r50 alone)
    payloads = server.configure("fit", 1, ["a", "b", "c"])
    for payload in payloads.values():  # every client gets the whole set
        parts = dict(arrays_to_spaced(payload.arrays[ANCHORS], payload.scalars))
        assert sorted(parts) == ["r50", "uni"]
        uni, r50 = parts["uni"], parts["r50"]
        # uni: the mean of a's and b's same-class anchors; r50: c's own
        assert np.allclose(uni["features"][:3], 3.0)
        assert np.allclose(uni["features"][3:], 4.0)
        assert np.allclose(r50["features"][:3], 10.0)
        assert np.allclose(r50["features"][3:], 11.0)
        assert uni["features"].shape == (6, 3) and r50["features"].shape == (6, 5)
    # the anchors and their spaces survive a checkpoint
    other = DESAServer(DESAParams(spaces="adapt"), run.server.ctx)
    other.load_state(server.state())
    again = other.configure("fit", 1, ["a"])["a"]
    assert again.scalars == payloads["a"].scalars
    for k, v in payloads["a"].arrays[ANCHORS].items():
        assert np.array_equal(again.arrays[ANCHORS][k], v)
    # without the option, the same replies are refused naming it
    same = DESAServer(DESAParams(), run.server.ctx)
    with pytest.raises(ConfigError, match=r"spaces: adapt"):
        same.aggregate("distill", 1, _distill_replies(spec))


def test_desa_client_meets_foreign_anchors_through_its_adapters(
    tmp_path: Path,
) -> None:
    run = _run(_cfg(tmp_path, "desa", "train.rounds=2", *ADAPT), tmp_path)
    run.run()
    for cid in OWN:
        state = run.states[cid]
        parts = arrays_to_spaced(state.arrays[ANCHORS], state.scalars)
        assert sorted(s for s, _ in parts) == sorted(s for s, _ in OWN.values())
        assert state.scalars["architecture"] in ("", "transmil")
        assert {k.split(".")[0] for k in state.arrays[ADAPTERS]} == {
            space_key(s) for c, (s, _) in OWN.items() if c != cid
        }
    rows = [json.loads(line) for line in (run.run_dir / "results.jsonl").open()]
    fits = [r for r in rows if r["kind"] == "round"]
    assert fits[0]["distill/anchors"] == 3 * 2 * 2  # 3 spaces x 2 classes x 2
    assert fits[-1]["fit/adapted_spaces"] == 2


def test_histofs_style_mapping_matches_the_receivers_moments() -> None:
    gen = torch.Generator().manual_seed(0)
    foreign = torch.stack(
        [torch.randn(50, generator=gen) * 4 + 20, torch.rand(50, generator=gen) + 3],
        dim=1,
    )
    mu, sigma = torch.randn(40, generator=gen), torch.rand(40, generator=gen)
    own = torch.stack([mu * 0.1, sigma * 0.2 + 0.5], dim=1)
    src, dst = style_moments(foreign), style_moments(own)
    assert torch.allclose(src[0], foreign.mean(0)) and torch.allclose(
        src[1], foreign.std(0, unbiased=False)
    )
    mapped = map_styles(foreign, src, dst)
    assert torch.allclose(style_moments(mapped), dst, atol=1e-5)
    # z-scores kept: the order of styles along each coordinate is unchanged
    assert torch.equal(mapped[:, 0].argsort(), foreign[:, 0].argsort())
    assert torch.allclose(map_styles(own, dst, dst), own, atol=1e-6)
    # a sigma that would go negative is clamped to stay a scale
    wide = torch.tensor([[0.0, 1e-5], [0.0, 1.0]])
    out = map_styles(torch.tensor([[0.0, -50.0]]), style_moments(wide), dst)
    assert float(out[0, 1]) == pytest.approx(1e-5)


def test_histofs_averages_weights_within_groups_by_slide_count(
    tmp_path: Path,
) -> None:
    run = _run(_cfg(tmp_path, "histofs"), tmp_path)
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
    assert other.member == server.member and other.spaces == server.spaces
    for cid in ids:
        assert np.array_equal(
            other.evaluate_payload(cid).arrays["weights"]["w"],
            server.evaluate_payload(cid).arrays["weights"]["w"],
        )
        assert np.array_equal(other.styles[cid], server.styles[cid])


def test_no_real_patch_embedding_leaves_a_client_in_any_space(
    tmp_path: Path,
) -> None:
    from fedpath.tasks.bags import BagTask

    for algo in ("desa", "feddgm"):
        run = _run(_cfg(tmp_path / algo, algo, *ADAPT), tmp_path / algo)
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
