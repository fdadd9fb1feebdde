"""FedStain's MixStyle level (fedpath.algorithms.fedstain): pixels or feature maps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.algorithms.fedstain import FedStainClient
from fedpath.config import ConfigError, load_config
from fedpath.models.backbones import FedModel
from fedpath.types import Payload
from tests.fixtures import make_run

FEATURES = ("algorithm.name=fedstain", "algorithm.params.mixstyle_level=features")


def spy_encoder(
    monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[bool, int | None, bool]]:
    """Record every encoder pass: (training, hooked stage or None, changed?).

    An unhooked pass is recorded once as ``(training, None, False)``; a hooked
    pass once per stage, with whether the hook changed that stage's output.
    """
    from fedpath.models.backbones import Encoder

    seen: list[tuple[bool, int | None, bool]] = []
    inner = Encoder.forward

    def forward(
        self: Encoder,
        x: torch.Tensor,
        hook: object = None,
        maps: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        if hook is None:
            seen.append((self.training, None, False))
            return inner(self, x, None, maps)

        def watched(stage: int, fmap: torch.Tensor) -> torch.Tensor:
            out = hook(stage, fmap)  # type: ignore[operator]
            seen.append((self.training, stage, not torch.equal(out, fmap)))
            return out

        return inner(self, x, watched, maps)

    monkeypatch.setattr(Encoder, "forward", forward)
    return seen


@pytest.mark.parametrize("layers", [None, "[1]"])
def test_feature_mixstyle_changes_training_activations_never_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layers: str | None
) -> None:
    extra = () if layers is None else (f"algorithm.params.mixstyle_layers={layers}",)
    run = make_run(tmp_path, *FEATURES, "train.rounds=1", *extra)
    seen = spy_encoder(monkeypatch)
    run.run()
    want = {0, 1} if layers is None else {1}  # default [0, 1]; tiny CNN: 2 stages
    hooked = [(t, s, c) for t, s, c in seen if s is not None]
    assert hooked and all(t for t, _, _ in hooked)  # hooked in training only
    assert {s for _, s, c in hooked if c} == want  # the configured stages change
    assert not any(c for _, s, c in hooked if s not in want)
    # evaluation happened, always without the hook
    assert any(not t for t, s, _ in seen if s is None)
    assert all(s is None for t, s, _ in seen if not t)


def test_pixel_mixstyle_never_hooks_the_encoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = make_run(tmp_path, "algorithm.name=fedstain", "train.rounds=1")
    assert run.server.params.mixstyle_level == "pixels"  # the default
    seen = spy_encoder(monkeypatch)
    run.run()
    assert seen and all(s is None for _, s, _ in seen)


def test_feature_mixstyle_mixes_the_views_with_their_randstain_rows(
    tmp_path: Path,
) -> None:
    """Inside one training pass: after stage 0 the original and RandStain rows
    are untouched; every X1/X2 channel mean becomes a convex combination of its
    own and its image's RandStain row's (lambda-mixing of the statistics)."""
    run = make_run(
        tmp_path, *FEATURES, "train.rounds=1", "algorithm.params.mixstyle_layers=[0]"
    )
    run.run()
    base = run.client_half(run.clients[0].client_id, 1)
    assert isinstance(base, FedStainClient)
    data = run.clients[0].train
    b = 8
    x = data.load(np.arange(b)).float() / 255
    y = torch.from_numpy(data.labels[:b])
    model = run.task.build_model()
    assert isinstance(model, FedModel)
    model.train()
    base.begin(model, Payload(), run.states[base.ctx.client_id])
    stage = model.encoder.stages
    got: dict[str, torch.Tensor] = {}
    h0 = stage[0].register_forward_hook(
        lambda _m, _i, out: got.__setitem__("out0", out.detach().clone())
    )
    h1 = stage[1].register_forward_pre_hook(
        lambda _m, args: got.__setitem__("in1", args[0].detach().clone())
    )
    base.loss(model, x, y)
    h0.remove()
    h1.remove()
    before, after = got["out0"], got["in1"]
    assert before.shape[0] == 4 * b  # [X, X_stain, X1, X2]
    assert torch.equal(after[: 2 * b], before[: 2 * b])
    assert not torch.equal(after[2 * b :], before[2 * b :])
    own = before[2 * b :].mean(dim=(2, 3))
    partner = before[b : 2 * b].repeat(2, 1, 1, 1).mean(dim=(2, 3))
    mixed = after[2 * b :].mean(dim=(2, 3))
    lo, hi = torch.minimum(own, partner), torch.maximum(own, partner)
    tol = 1e-4 * (1 + own.abs())
    assert bool(((mixed >= lo - tol) & (mixed <= hi + tol)).all())
    # at evaluation the same model runs with no mixing: stage 1 sees stage 0
    model.eval()
    with torch.no_grad():
        maps = model.feature_maps(x)
        stage1 = stage[1](maps[0])
    torch.testing.assert_close(stage1, maps[1])


def test_feature_level_views_are_not_pixel_mixed(tmp_path: Path) -> None:
    """With AugMix off, feature level leaves X1 = X2 = X at the pixels (MixStyle
    acts inside the encoder); pixel level restyles them."""
    off = "algorithm.params.augmix=false"
    outs = {}
    for level in ("pixels", "features"):
        run = make_run(
            tmp_path / level,
            "algorithm.name=fedstain",
            f"algorithm.params.mixstyle_level={level}",
            "train.rounds=1",
            off,
        )
        run.run()
        client = run.client_half(run.clients[0].client_id, 1)
        assert isinstance(client, FedStainClient)
        client.begin(
            run.task.build_model(), Payload(), run.states[client.ctx.client_id]
        )
        x = run.clients[0].train.load(np.arange(8)).float() / 255
        outs[level] = (x, client.views(x))
    x, views = outs["features"]
    assert len(views) == 4 and torch.equal(views[2], x) and torch.equal(views[3], x)
    x, views = outs["pixels"]
    assert not torch.equal(views[2], x)


def test_mixstyle_level_config_errors(tmp_path: Path) -> None:
    def fedstain(*params: str) -> None:
        load_config(
            None,
            ["algorithm.name=fedstain", *(f"algorithm.params.{p}" for p in params)],
        )

    fedstain("mixstyle_level=features", "mixstyle_layers=[0,2]")
    with pytest.raises(
        ConfigError, match="'algorithm.params.mixstyle_layers': expected null"
    ):
        fedstain("mixstyle_layers=[0]")  # pixel level (the default)
    with pytest.raises(ConfigError, match="'algorithm.params.mixstyle_layers'"):
        fedstain("mixstyle_level=features", "mixstyle_layers=[-1]")
    with pytest.raises(ConfigError, match="'algorithm.params.mixstyle_layers'"):
        fedstain("mixstyle_level=features", "mixstyle_layers=[1,1]")
    with pytest.raises(ConfigError, match="'algorithm.params.randstain'"):
        fedstain("mixstyle_level=features", "randstain=false")
    with pytest.raises(ConfigError, match="'algorithm.params.mixstyle_mode'"):
        fedstain("mixstyle_level=features", "mixstyle_mode=paper")
    # a stage the configured backbone lacks: named with its valid range, before
    # any client trains (the tiny small_cnn has widths [8, 16]: stages 0-1)
    with pytest.raises(ConfigError, match=r"mixstyle_layers.*\[2\].*valid indices 0-1"):
        make_run(tmp_path, *FEATURES, "algorithm.params.mixstyle_layers=[0,2]")


@pytest.mark.parametrize(("backbone", "stages"), [("resnet18", 4), ("small_cnn", 3)])
def test_mixstyle_layer_range_follows_the_backbone(backbone: str, stages: int) -> None:
    from fedpath.algorithms.fedstain import check_mixstyle_layers
    from fedpath.config import ModelConfig
    from fedpath.models.backbones import build_model
    from fedpath.params.algorithms import FedStainParams

    params = {"small_cnn": {"widths": [4, 8, 8]}, "resnet18": {}}[backbone]
    model = build_model(ModelConfig(backbone=backbone, params=params), 2)
    last = FedStainParams(mixstyle_level="features", mixstyle_layers=[stages - 1])
    check_mixstyle_layers(last, model, backbone)
    beyond = FedStainParams(mixstyle_level="features", mixstyle_layers=[0, stages])
    with pytest.raises(ConfigError, match=f"valid indices 0-{stages - 1}"):
        check_mixstyle_layers(beyond, model, backbone)
