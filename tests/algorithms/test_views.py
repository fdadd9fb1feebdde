"""forward_views (fedpath.algorithms.views): M versions of a batch through a real
FedModel as one (M * B) batch, split back version by version."""

from __future__ import annotations

import torch

from fedpath.algorithms.views import ViewOutputs, forward_views
from fedpath.models.backbones import FedModel, small_cnn
from fedpath.params.models import SmallCNNParams


def model_and_views() -> tuple[FedModel, list[torch.Tensor]]:
    torch.manual_seed(0)
    model = small_cnn(SmallCNNParams(widths=[4, 8]), 2)
    gen = torch.Generator().manual_seed(1)
    # versions with different colour statistics, so BatchNorm's batch statistics
    # over all of them differ from those over any one
    views = [torch.rand((3, 3, 8, 8), generator=gen) * (i + 1) for i in range(3)]
    return model, views


def test_outputs_are_version_major_and_split_in_the_given_order() -> None:
    model, views = model_and_views()
    out = forward_views(model.eval(), views)
    assert isinstance(out, ViewOutputs)
    assert out.features.shape == (9, model.feature_dim)
    assert out.logits.shape == (9, 2)
    assert [z.shape[0] for z in out.zs] == [3, 3, 3]
    with torch.no_grad():
        for i, v in enumerate(views):
            # eval mode: each version alone gives the same rows
            torch.testing.assert_close(out.zs[i], model.encode(v))
            torch.testing.assert_close(out.ls[i], model(v))
            torch.testing.assert_close(out.features[3 * i : 3 * i + 3], out.zs[i])


def test_training_mode_normalizes_over_all_versions_in_one_pass() -> None:
    model, views = model_and_views()
    model.train()
    calls: list[int] = []
    model.encoder.register_forward_hook(lambda m, i, o: calls.append(i[0].shape[0]))
    out = forward_views(model, views)
    assert calls == [9]  # one pass of the (M * B) batch
    with torch.no_grad():
        joint = model.encode(torch.cat(views))
        alone = model.encode(views[0])
    torch.testing.assert_close(out.features.detach(), joint)
    # BatchNorm's batch statistics cover every version, so version 0 differs
    # from a pass of version 0 alone
    assert not torch.allclose(out.zs[0].detach(), alone, atol=1e-4)


def test_gradients_reach_the_encoder_through_every_version() -> None:
    model, views = model_and_views()
    out = forward_views(model.train(), views)
    out.ls[2].sum().backward()
    grads = [p.grad for p in model.encoder.parameters()]
    assert all(g is not None for g in grads)
    assert any(float(g.abs().sum()) > 0 for g in grads if g is not None)


def test_forward_views_is_one_pass_split_by_version() -> None:
    from fedpath.algorithms.views import forward_views

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Linear(12, 5)
            self.classifier = torch.nn.Linear(5, 3)

        def encode(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x.flatten(1))

    torch.manual_seed(0)
    net = Net()
    views = [torch.rand(4, 3, 2, 2) for _ in range(3)]
    out = forward_views(net, views)
    assert out.features.shape == (12, 5) and out.logits.shape == (12, 3)
    assert len(out.zs) == len(out.ls) == 3
    for v, z, lg in zip(views, out.zs, out.ls, strict=True):
        torch.testing.assert_close(z, net.encode(v))
        torch.testing.assert_close(lg, net.classifier(z))
    assert torch.equal(torch.cat(out.zs), out.features)
