"""The baselines of FedHD's main table: FedHE, DESA, HistoFS, FedDGM-approx.

Smoke runs on tiny synthetic bags, each formula against a hand computation,
what each client uploads (never a real patch embedding), and bad options.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedpath.algorithms.base import ClientAlgorithm
from fedpath.algorithms.desa import (
    DESAClient,
    kd_loss,
    mix_anchors,
    teacher_logits,
)
from fedpath.algorithms.feddgm import FedDGMClient, sample_slides
from fedpath.algorithms.fedhe import FedHEClient, proto_term, server_mean
from fedpath.algorithms.histofs import (
    HistoFSClient,
    adain,
    authenticity,
    patch_styles,
    pseudo_bag_styles,
    w2_kmeans,
)
from fedpath.config import ConfigError, ExperimentConfig, load_config
from fedpath.data.bags import split_bags
from fedpath.mil.bags import SlideBag
from fedpath.mil.gmm import GMM
from fedpath.mil.models import build_mil_model
from fedpath.params.mil_baselines import DESAParams, FedHEParams, HistoFSParams
from fedpath.runtime.audit import audit
from fedpath.runtime.inprocess import InProcessRun
from fedpath.types import ClientState, Payload
from tests.algorithms.test_fedhd import TINY, _run

SMALL = {
    "fedhe": [],
    "desa": [
        "algorithm.params.anchors_per_class=2",
        "algorithm.params.tokens=20",
        "algorithm.params.iters=10",
    ],
    "histofs": [],
    "feddgm": ["algorithm.params.components=2", "algorithm.params.tokens=20"],
}
#: what each baseline's clients may send, per stage
UPLOADS = {
    "fedhe": {"fit": {"class_logits"}},
    "desa": {"distill": {"synthetic"}, "fit": {"anchor_logits"}},
    "histofs": {"stats": {"styles"}, "fit": {"weights"}},
    "feddgm": {"distill": {"synthetic"}, "fit": set()},
}
HETERO = [
    "algorithm.params.models={hospital_2: transmil}",
    "algorithm.params.model_params={transmil: {hidden: 16, landmarks: 4}}",
]


def tiny(tmp_path: Path, algo: str, *extra: str) -> ExperimentConfig:
    return load_config(
        None,
        [f"output_dir={tmp_path}", *TINY, f"algorithm.name={algo}", *SMALL[algo],
         *extra],
    )  # fmt: skip


# ------------------------------------------------------------------ smoke


def check_clean_run(run: InProcessRun, rec: dict[str, Any], algo: str) -> None:
    """Every client's metrics in range, the audit clean, and only ``algo``'s
    groups sent at each stage."""
    for m in rec["evaluation"]["clients"].values():
        assert 0.0 <= m["accuracy"] <= 1.0 and m["n"] >= 2
    _, findings = audit(run.run_dir)
    assert findings == []
    sent: dict[str, set[str]] = {}
    for line in (run.run_dir / "traffic.jsonl").open():
        r = json.loads(line)
        sent.setdefault(r["stage"], set()).update(g for g, *_ in r["sent"] or [])
    assert sent == UPLOADS[algo]


@pytest.mark.parametrize("algo", sorted(SMALL))
def test_baseline_runs_two_rounds_and_sends_only_its_groups(
    tmp_path: Path, algo: str
) -> None:
    hetero = HETERO if algo != "histofs" else []
    run = _run(tiny(tmp_path, algo, "train.rounds=2", *hetero), tmp_path)
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
    run = _run(tiny(tmp_path, algo), tmp_path)
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


# ------------------------------------------------------------------ FedHE


def test_fedhe_server_mean_is_unweighted_over_clients_that_saw_the_class() -> None:
    a = {"logits": np.array([[1.0, -1.0], [0.0, 0.0]]), "count": np.array([5, 0])}
    b = {"logits": np.array([[3.0, 1.0], [2.0, 4.0]]), "count": np.array([1, 2])}
    out = server_mean([a, b])
    # class 0: both clients, NOT weighted by their 5 vs 1 bags; class 1: b only
    assert np.allclose(out["logits"], [[2.0, 0.0], [2.0, 4.0]])
    assert out["count"].tolist() == [2, 1]


def test_fedhe_proto_term_is_mse_to_the_class_mean() -> None:
    glob = {"logits": np.array([[1.0, 2.0], [0.0, 0.0]]), "count": np.array([1, 0])}
    logits = torch.tensor([[0.0, 5.0]], requires_grad=True)
    value = proto_term(logits, 0, glob)
    assert math.isclose(float(value.detach()), ((0 - 1) ** 2 + (5 - 2) ** 2) / 2)
    value.backward()
    assert torch.allclose(logits.grad, torch.tensor([[-1.0, 3.0]]))  # type: ignore[arg-type]
    assert float(proto_term(logits, 1, glob)) == 0.0  # class nowhere: no term
    assert float(proto_term(logits, 0, None)) == 0.0  # round 1


def test_fedhe_uploads_the_last_epochs_mean_logits(tmp_path: Path) -> None:
    run = _run(tiny(tmp_path, "fedhe", "train.local_epochs=3"), tmp_path)
    ctx = run.client_half("hospital_0/c0", 1).ctx
    assert isinstance(run.run_ctx.params, FedHEParams)
    reply = FedHEClient(run.run_ctx.params, ctx).handle("fit", Payload(), ClientState())
    labels = np.array([b.label for b in split_bags(ctx.data)])
    up = reply.arrays["class_logits"]
    # one epoch's bags per class, not the three epochs'
    assert up["count"].tolist() == np.bincount(labels, minlength=2).tolist()
    assert up["logits"].shape == (2, 2) and np.isfinite(up["logits"]).all()


# ------------------------------------------------------------------ DESA


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
    run = _run(tiny(tmp_path, "desa"), tmp_path)
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


# ------------------------------------------------------------------ HistoFS


def test_histofs_patch_styles_and_w2_kmeans() -> None:
    x = torch.tensor([[1.0, 3.0], [0.0, 0.0], [2.0, 2.0]])
    assert torch.allclose(
        patch_styles(x), torch.tensor([[2.0, 1.0], [0.0, 0.0], [2.0, 0.0]])
    )
    # two well separated groups of (mu, sigma): the centres are the group means
    styles = torch.tensor(
        [[0.0, 1.0], [0.2, 1.2], [0.1, 0.8], [5.0, 3.0], [5.4, 3.2]], dtype=torch.float
    )
    centres, assign = w2_kmeans(styles, 2, seed=3)
    got = centres[centres[:, 0].argsort()]
    assert torch.allclose(got, torch.tensor([[0.1, 1.0], [5.2, 3.1]]), atol=1e-5)
    # each point sits with the centre nearest in W2 = sqrt(dmu^2 + dsigma^2)
    for s, a in zip(styles, assign, strict=True):
        w2 = [math.sqrt((s[0] - c[0]) ** 2 + (s[1] - c[1]) ** 2) for c in centres]
        assert int(a) == int(np.argmin(w2))
    few = pseudo_bag_styles(torch.randn(3, 8), 5, 10, 0)
    assert few.shape == (3, 2)  # fewer patches than K


def test_histofs_adain_and_authenticity() -> None:
    h = torch.tensor([[1.0, 2.0, 3.0, 6.0], [-1.0, 0.0, 0.0, 1.0]])
    style = torch.tensor([10.0, 0.5])
    out = adain(h, style)
    mu = h.mean(1, keepdim=True)
    sd = h.std(1, unbiased=False, keepdim=True)
    assert torch.allclose(out, (h - mu) / (sd + 1e-5) * 0.5 + 10.0)
    assert torch.allclose(out.mean(1), torch.full((2,), 10.0))
    assert torch.allclose(
        out.std(1, unbiased=False), 0.5 * sd[:, 0] / (sd[:, 0] + 1e-5)
    )
    own = adain(h[:1], patch_styles(h[:1])[0])
    assert torch.allclose(own, h[:1], atol=1e-4)  # own style: identity
    a = torch.tensor([[0.5, 0.5, 0.0]])
    assert math.isclose(float(authenticity(a, a, 0.4)), 0.6, rel_tol=1e-6)
    b = torch.tensor([[0.0, 0.0, 1.0]])
    assert math.isclose(float(authenticity(a, b, 0.4)), 1.0, rel_tol=1e-6)
    c = torch.tensor([[1.0, 0.0, 0.0]])
    want = 1 - 0.4 * 0.5 / math.sqrt(0.5)
    assert math.isclose(float(authenticity(a, c, 0.4)), want, rel_tol=1e-6)


# ------------------------------------------------------------------ FedDGM


def test_feddgm_samples_follow_the_mixture() -> None:
    g = GMM(
        weights=torch.tensor([0.75, 0.25]),
        means=torch.tensor([[0.0, 0.0], [8.0, -4.0]]),
        covs=torch.ones(2, 2) * 0.01,
        covariance="diag",
    )
    (bag,) = sample_slides(g, 1, 4000, 1, "h", seed=0)
    assert bag.features.shape == (4000, 2) and bag.label == 1
    near_second = (bag.features[:, 0] > 4).float().mean()
    assert abs(float(near_second) - 0.25) < 0.03
    assert torch.allclose(bag.features.mean(0), torch.tensor([2.0, -1.0]), atol=0.2)


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


def test_histofs_refuses_heterogeneous_models_in_code() -> None:
    with pytest.raises(ConfigError, match="one architecture"):
        HistoFSParams(models={"hospital_0": "transmil"})
