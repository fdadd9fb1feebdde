"""DESA (FedHD's baseline): the KD loss, teacher logits, anchor mixing (within
each embedding space), the regulariser, and adapters for foreign anchors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.algorithms.desa import (
    ANCHORS,
    DESAClient,
    DESAServer,
    kd_loss,
    mix_anchors,
    teacher_logits,
)
from fedpath.algorithms.mil_common import arrays_to_spaced, bags_to_arrays
from fedpath.algorithms.mil_spaces import ADAPTERS
from fedpath.config import ConfigError
from fedpath.mil.adapters import space_key
from fedpath.mil.bags import SlideBag
from fedpath.mil.models import build_mil_model
from fedpath.params.mil_baselines import DESAParams
from fedpath.types import Payload
from tests.mil_helpers import ADAPT, OWN, inprocess_run, tiny_baseline


def test_desa_kd_loss_matches_a_hand_computation() -> None:
    s = torch.tensor([[2.0, -1.0, 0.5]])
    t = torch.tensor([[0.0, 3.0, -2.0]])
    y = torch.tensor([1])
    temp = 20.0
    ps = np.exp(s.numpy() / temp) / np.exp(s.numpy() / temp).sum()
    pt = np.exp(t.numpy() / temp) / np.exp(t.numpy() / temp).sum()
    kl_mean = float((pt * (np.log(pt) - np.log(ps))).mean())  # over the 3 elements
    ce = -float(np.log(np.exp(s.numpy()[0]) / np.exp(s.numpy()[0]).sum())[1])
    want = 0.1 * ce + 0.9 * temp**2 * kl_mean
    assert math.isclose(float(kd_loss(s, t, y, temp, 0.1)), want, rel_tol=1e-5)
    # the T^2 factor: at T = 1 the KL part is 400x smaller
    got1 = float(kd_loss(s, t, y, 1.0, 0.0))
    p1s = np.exp(s.numpy()) / np.exp(s.numpy()).sum()
    p1t = np.exp(t.numpy()) / np.exp(t.numpy()).sum()
    assert math.isclose(got1, float((p1t * np.log(p1t / p1s)).mean()), rel_tol=1e-5)


def test_desa_teacher_excludes_the_receivers_own_logits() -> None:
    ups = {c: np.full((2, 2), v, np.float32) for c, v in (("a", 1), ("b", 3), ("c", 8))}
    for receiver, want in (("a", 5.5), ("b", 4.5), ("c", 2.0)):
        got = teacher_logits(ups, receiver)
        assert got is not None and np.allclose(got, want)
    assert teacher_logits({"a": ups["a"]}, "a") is None


def test_desa_anchors_average_same_index_slides_of_each_class() -> None:
    def bag(v: float, y: int, n: int = 3) -> SlideBag:
        return SlideBag("s", torch.full((n, 2), v), y, "h")

    one = [bag(0, 0), bag(2, 0), bag(10, 1)]
    two = [bag(4, 0), bag(6, 0)]  # no class 1
    anchors = mix_anchors([one, two])
    assert [a.label for a in anchors] == [0, 0, 1]
    assert [float(a.features[0, 0]) for a in anchors] == [2.0, 4.0, 10.0]
    short = mix_anchors([[bag(1, 0, 3)], [bag(3, 0, 2)]])  # guard dropped a token
    assert short[0].features.shape == (2, 2)


def test_desa_regulariser_acts_only_with_an_anchor_per_class(tmp_path: Path) -> None:
    run = inprocess_run(tiny_baseline(tmp_path, "desa"), tmp_path)
    ctx = run.client_half("hospital_0/c0", 1).ctx
    gen = torch.Generator().manual_seed(0)
    anchors = [
        SlideBag(f"a{i}", torch.randn(6, 8, generator=gen), i % 2, "x")
        for i in range(4)
    ]
    model = build_mil_model("abmil", 8, 2, {"hidden": 16, "attn_dim": 8})
    model.eval()
    bag, label = torch.randn(7, 8, generator=gen), torch.tensor([1])
    teacher = np.zeros((4, 2), np.float32)
    for mode, zero in (("one", True), ("per_class", False)):
        p = DESAParams(reg_anchors=mode)  # type: ignore[arg-type]
        out = DESAClient(p, ctx).loss_fn(anchors, teacher)(model, bag, label, False)
        # SupCon over two samples has one contrast, its positive: log 1 = 0
        assert (abs(float(out["reg"])) < 1e-6) is zero
        assert "kd" in out and float(out["kd"]) > 0
    no_kd = DESAClient(DESAParams(), ctx).loss_fn(anchors, None)
    assert "kd" not in no_kd(model, bag, label, False)


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
    run = inprocess_run(tiny_baseline(tmp_path, "desa"), tmp_path)
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
    run = inprocess_run(
        tiny_baseline(tmp_path, "desa", "train.rounds=2", *ADAPT), tmp_path
    )
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
