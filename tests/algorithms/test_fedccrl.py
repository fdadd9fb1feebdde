"""FedCCRL (fedpath.algorithms.fedccrl): a client styles its views with the other
clients' (mean, std), never its own; two independent AugMix(MixStyle(x)) views;
the alignment term is the mean of S(f(x), f(v_k)).

The last test checks the full loss formula of FedCCRL and FedAlign.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.algorithms.fedccrl import FedCCRLClient, FedCCRLServer
from fedpath.algorithms.names import FIT, POOL, STATS
from fedpath.algorithms.views import forward_views
from fedpath.config import load_config
from fedpath.losses import fedccrl_contrastive
from fedpath.params.algorithms import FedAlignParams, FedCCRLParams
from fedpath.types import ClientState, Payload
from tests.algorithms.halves import Halves, halves
from tests.conftest import tiny_overrides


def fedccrl(tmp_path: Path, *params: str) -> Halves:
    over = ["algorithm.name=fedccrl", *(f"algorithm.params.{p}" for p in params)]
    return halves(load_config(None, tiny_overrides(tmp_path, *over)))


def batch(client: FedCCRLClient) -> tuple[torch.Tensor, torch.Tensor]:
    x = client.ctx.data.load(np.arange(6)).float() / 255
    return x, torch.from_numpy(client.ctx.data.labels[:6]).long()


def test_a_client_styles_with_the_other_hospitals_statistics_only(
    tmp_path: Path,
) -> None:
    h = fedccrl(tmp_path, "upload_ratio=0.25")
    server = h.server(["c0", "c1"])
    assert isinstance(server, FedCCRLServer)
    domains = {"c0": "hospital_0", "c1": "hospital_1"}
    ups = {
        c: h.client(c, d).handle(STATS, Payload({}, {"round": 1}), ClientState())
        for c, d in domains.items()
    }
    server.aggregate(STATS, 1, ups)
    msgs = server.configure(FIT, 1, ["c0", "c1"])
    for me, other in (("c0", "c1"), ("c1", "c0")):
        received = msgs[me].arrays[POOL]["mean_std"]
        np.testing.assert_array_equal(received, ups[other].group(STATS)["mean_std"])
        client = h.client(me, domains[me])
        client.begin(client.ctx.build_model(), msgs[me], ClientState())
        assert not client.pool_is_own
        np.testing.assert_array_equal(client.ms_pool.stats.numpy(), received)


def test_views_are_the_batch_and_two_independent_styled_versions(
    tmp_path: Path,
) -> None:
    client = fedccrl(tmp_path).client()
    client.begin(client.ctx.build_model(), Payload(), ClientState())
    x, _ = batch(client)
    views = client.views(x)
    assert len(views) == 3 and views[0] is x
    for v in views[1:]:
        assert v.shape == x.shape and v.dtype == torch.float32
        assert float(v.min()) >= 0.0 and float(v.max()) <= 1.0
        assert not torch.allclose(v, x)
    assert not torch.allclose(views[1], views[2])


def test_geometric_augmix_is_replayed_by_the_client_generator(
    tmp_path: Path,
) -> None:
    client = fedccrl(tmp_path, "augmix=geometric").client()
    client.begin(client.ctx.build_model(), Payload(), ClientState())
    x, _ = batch(client)
    client.generator.manual_seed(5)
    first = client.augment(x)
    client.generator.manual_seed(5)
    assert torch.equal(client.augment(x), first)


def test_alignment_is_the_mean_contrastive_of_each_view_against_the_batch(
    tmp_path: Path,
) -> None:
    client = fedccrl(tmp_path, "augmix=geometric", "temperature=0.2").client()
    model = client.ctx.build_model().eval()  # the same features in both passes
    client.begin(model, Payload(), ClientState())
    x, y = batch(client)
    client.generator.manual_seed(1)
    _, ce, ra = client.aligned_forward(model, x, y)
    client.generator.manual_seed(1)
    with torch.no_grad():
        out = forward_views(model, client.views(x))
    z0, z1, z2 = out.zs
    by_hand = 0.5 * (
        fedccrl_contrastive(z0, z1, y, 0.2) + fedccrl_contrastive(z0, z2, y, 0.2)
    )
    torch.testing.assert_close(ra.detach(), by_hand)
    ce_sum = sum(torch.nn.functional.cross_entropy(lg, y) for lg in out.ls)
    torch.testing.assert_close(ce.detach(), torch.as_tensor(ce_sum))


@pytest.mark.parametrize("algorithm", ["fedccrl", "fedalign"])
def test_fedccrl_and_fedalign_losses_follow_their_formulas(
    tmp_path: Path, algorithm: str
) -> None:
    """L = CE(x) + CE(v1) + CE(v2) + l1 RA + l2 JS (+ l3 MSE for FedAlign)."""
    from fedpath.algorithms.base import ALGORITHMS
    from fedpath.config import resolve_params
    from fedpath.types import ClientState
    from tests.fixtures import make_client_context

    over = tiny_overrides(
        tmp_path, f"algorithm.name={algorithm}", "algorithm.params.augmix=geometric"
    )
    cfg = load_config(None, over)
    schema = ALGORITHMS.params(algorithm)
    assert schema is not None and issubclass(schema, FedCCRLParams)
    params = resolve_params(schema, cfg.algorithm.params, "algorithm.params")
    ctx = make_client_context(cfg=cfg)
    client = ALGORITHMS.get(algorithm).client(params, ctx)
    assert isinstance(client, FedCCRLClient)  # FedAlign's client is one too
    model = ctx.task.images().build_model()
    client.begin(model, Payload(), ClientState())
    x = ctx.data.load(np.arange(8)).float() / 255
    y = torch.from_numpy(ctx.data.labels[:8])
    out = client.loss(model, x, y)
    expected = out["cls"] + params.lambda1 * out["ra"] + params.lambda2 * out["js"]
    if algorithm == "fedalign":
        assert isinstance(params, FedAlignParams)
        expected = expected + params.lambda3 * out["mse"]
        assert float(out["mse"]) > 0
    else:
        assert "mse" not in out
    assert float(out["ra"]) > 0 and float(out["js"]) >= 0
    torch.testing.assert_close(out["loss"].detach(), expected, rtol=1e-6, atol=0)
    # CE is summed over the three versions, as the released code does (eval
    # mode: BatchNorm statistics would otherwise cover the three versions)
    model.eval()
    client.generator.manual_seed(3)
    views = client.views(x)
    client.generator.manual_seed(3)
    ce = sum((ctx.cross_entropy(model(v), y) for v in views), torch.zeros(()))
    client.generator.manual_seed(3)
    torch.testing.assert_close(client.loss(model, x, y)["cls"], ce.detach())
