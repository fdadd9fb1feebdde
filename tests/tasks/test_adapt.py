"""Test-time BatchNorm adaptation (AdaBN): the statistics it computes, the run's
``evaluation.adapt_bn`` blocks, and ``fedpath adapt-bn`` for a new hospital."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from fedpath.artifact import read_model_file
from fedpath.cli import main
from fedpath.config import ConfigError, load_config
from fedpath.evaluation.metrics import classification_metrics
from fedpath.loading import load_model
from fedpath.runtime.experiment import (
    collect_rows,
    load_dataset,
    run_dir_for,
    run_experiment,
    splits_of,
)
from fedpath.tasks.adapt import adapt_batchnorm, adapt_on_split, batchnorm_layers
from fedpath.tasks.images import predict_probs
from tests.conftest import tiny_overrides


class Probe(nn.Module):
    """conv -> BN -> dropout -> pooled linear; records whether dropout trained."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.9)
        self.fc = nn.Linear(4, 2)
        self.drop_modes: list[bool] = []
        self.drop.register_forward_hook(
            lambda m, i, o: self.drop_modes.append(m.training)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.drop(self.bn(self.conv(x))).mean((2, 3)))


def _batches(seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(5, 3, 6, 6, generator=g) * 3 + 2 for _ in range(2)]


def test_adabn_statistics_are_the_mean_of_the_batch_statistics() -> None:
    torch.manual_seed(0)
    model = Probe()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batches = _batches()
    n = adapt_batchnorm(model, batches)
    assert n == 10
    with torch.no_grad():
        acts = [model.conv(b) for b in batches]
    means = torch.stack([a.mean((0, 2, 3)) for a in acts])
    vars_ = torch.stack([a.var((0, 2, 3), unbiased=True) for a in acts])
    torch.testing.assert_close(model.bn.running_mean, means.mean(0))
    torch.testing.assert_close(model.bn.running_var, vars_.mean(0))
    assert model.bn.running_mean is not None
    assert not torch.allclose(model.bn.running_mean, before["bn.running_mean"])
    # every learnt weight (the BN affine included) is untouched
    for k in ("conv.weight", "bn.weight", "bn.bias", "fc.weight"):
        assert torch.equal(model.state_dict()[k], before[k])
    # dropout stayed off; the model and its BN are back in eval mode, momentum too
    assert model.drop_modes == [False, False]
    assert not model.training and not model.bn.training
    assert model.bn.momentum == 0.1


def test_adabn_refuses_models_without_batchnorm_and_empty_inputs() -> None:
    with pytest.raises(ValueError, match="no BatchNorm layer"):
        adapt_batchnorm(nn.Linear(3, 2), [torch.randn(4, 3)])
    model = Probe()
    assert model.bn.running_mean is not None
    model.bn.running_mean.fill_(0.7)
    with pytest.raises(ValueError, match="two or more images"):
        adapt_batchnorm(model, [torch.randn(1, 3, 6, 6)])
    assert torch.all(model.bn.running_mean == 0.7)  # left as it was
    assert len(batchnorm_layers(model)) == 1


def _run(tmp_path: Path, *extra: str) -> tuple[list[str], dict, Path]:
    over = tiny_overrides(
        tmp_path, "train.rounds=1", "lodo.targets=[hospital_2]", *extra
    )
    cfg = load_config(None, over)
    run_experiment(cfg)
    run_dir = run_dir_for(cfg, "hospital_2", 0)
    final = json.loads((run_dir / "final.json").read_text())["evaluation"]
    return over, final, run_dir


def _adapted_metrics(model: nn.Module, images, scored) -> dict:  # type: ignore[no-untyped-def]
    adapt_on_split(model, images, 64, torch.device("cpu"))
    p = predict_probs(model, scored, 64, torch.device("cpu")).double().numpy()
    return dict(classification_metrics(scored.labels, p))


def test_a_run_reports_the_adapted_model_beside_the_plain_one(tmp_path: Path) -> None:
    over, final, run_dir = _run(
        tmp_path, "evaluation.adapt_bn=true", "partition.validation=0.4"
    )
    cfg = load_config(None, over)
    ds = load_dataset(cfg.data)
    scored = ds.split("hospital_2", "all")  # lodo.eval_split: all -> transductive
    block = final["adapted"]
    assert block["n"] == len(scored) and "evaluated" in block["on"]
    # model.fpm keeps the federation's statistics: adapting it by hand gives the
    # run's adapted numbers, and its plain numbers are the run's target block
    model = load_model(run_dir / "model.fpm").model
    plain = predict_probs(model, scored, 64, torch.device("cpu")).double().numpy()
    want_plain = classification_metrics(scored.labels, plain)
    assert final["target"]["auroc"] == pytest.approx(want_plain["auroc"], abs=1e-9)
    want = _adapted_metrics(model, scored, scored)
    for k in ("balanced_accuracy", "auroc", "ece"):
        assert block["target"][k] == pytest.approx(want[k], abs=1e-9)
    assert block["target"]["ece"] != pytest.approx(final["target"]["ece"], abs=1e-9)
    assert final["selected"]["adapted"]["n"] == len(scored)
    # fedpath table --split adapted tabulates the adapted blocks
    (row,) = collect_rows([tmp_path], "adapted")
    assert row.metrics == block["target"]
    (sel,) = collect_rows([tmp_path], "adapted", "selected")
    assert sel.metrics == final["selected"]["adapted"]["target"]
    assert "adapted" in splits_of([tmp_path])
    argv = ["table", str(tmp_path), "--split", "adapted", "--format", "csv", "-q"]
    assert main([*argv, "--metric", "balanced_accuracy"]) == 0


def test_with_a_test_split_the_adaptation_images_are_disjoint(tmp_path: Path) -> None:
    over, final, _ = _run(tmp_path, "evaluation.adapt_bn=true", "lodo.eval_split=test")
    ds = load_dataset(load_config(None, over).data)
    assert final["adapted"]["n"] == len(ds.split("hospital_2", "train"))
    assert final["adapted"]["target"]["n"] == len(ds.split("hospital_2", "test"))
    assert final["adapted"]["on"] == "target train split"
    # the report shows the adapted table beside the plain one, equal to final.json
    from fedpath.report import write_report

    write_report([tmp_path], tmp_path / "r.html", figures=False)
    html = (tmp_path / "r.html").read_text()
    table = re.search(
        r'data-metric="balanced_accuracy \(BatchNorm adapted\)">(.*?)</table>',
        html,
        re.S,
    )
    assert table is not None and "target train split" in html
    cell = re.search(r'data-column="hospital_2" data-mean="([^"]+)"', table.group(1))
    assert cell is not None
    want = 100 * final["adapted"]["target"]["balanced_accuracy"]
    assert float(cell.group(1)) == pytest.approx(want, abs=1e-9)


def test_adapt_bn_config_errors_name_the_option(tmp_path: Path) -> None:
    base = tiny_overrides(tmp_path, "evaluation.adapt_bn=true")
    with pytest.raises(ConfigError, match="evaluation.adapt_bn"):
        load_config(None, [*base, "evaluation.protocol=linear_probe"])
    with pytest.raises(ConfigError, match="evaluation.adapt_bn"):
        load_config(None, [*base, "lodo.targets=none", "evaluation.protocol=local"])


def test_the_adapt_bn_command_writes_an_adapted_model_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    over, _, run_dir = _run(tmp_path)
    cfg = load_config(None, over)
    split = load_dataset(cfg.data).split("hospital_2", "all")
    images = split.load(np.arange(len(split)))
    folder = tmp_path / "site" / "unsorted"
    folder.mkdir(parents=True)
    for i, im in enumerate(images):
        Image.fromarray(im.permute(1, 2, 0).numpy()).save(folder / f"{i:03d}.png")
    src, out = run_dir / "model.fpm", tmp_path / "adapted.fpm"
    assert main(["adapt-bn", str(src), str(tmp_path / "site"),
                 "--out", str(out), "--batch-size", "16", "-q"]) == 0  # fmt: skip
    meta, weights = read_model_file(out)
    assert meta.adapted_bn["images"] == len(split)
    assert meta.adapted_bn["folder"] == "site"
    _, original = read_model_file(src)
    stats = [k for k in weights if k.endswith("running_mean")]
    assert stats and all(not torch.equal(weights[k], original[k]) for k in stats)
    learnt = [k for k in weights if "running" not in k and "num_batches" not in k]
    assert all(torch.equal(weights[k], original[k]) for k in learnt)
    # the same as adapting in memory on those images, 16 at a time
    model = load_model(src).model
    x = images.float() / 255.0
    adapt_batchnorm(model, list(x.split(16)))
    for k, v in model.state_dict().items():
        torch.testing.assert_close(weights[k], v)
    # bad input: the model file itself as --out, a folder without images
    capsys.readouterr()
    assert main(["adapt-bn", str(src), str(folder), "--out", str(src), "-q"]) != 0
    assert "is the model file itself" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["adapt-bn", str(src), str(tmp_path / "empty"),
                 "--out", str(tmp_path / "x.fpm"), "-q"]) != 0  # fmt: skip
    assert "no images" in capsys.readouterr().err
    assert not (tmp_path / "x.fpm").exists()


def test_adabn_leaves_the_layers_it_is_told_to_keep() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.BatchNorm2d(4))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    adapt_batchnorm(model, _batches(), keep=["1"])
    after = model.state_dict()
    assert torch.equal(after["1.running_mean"], before["1.running_mean"])
    assert not torch.equal(after["2.running_mean"], before["2.running_mean"])
    assert [id(m) for m in batchnorm_layers(model, ["1"])] == [id(model[2])]
    with pytest.raises(ValueError, match="outside its frozen stages"):
        adapt_batchnorm(model, _batches(), keep=["1", "2"])


def test_the_frozen_stages_keep_their_statistics_in_the_run_and_at_a_hospital(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FEDPATH_QUIET", raising=False)  # CI sets it: the summary
    # trainable: last_stages freezes stage 0 (its BatchNorm statistics too);
    # AdaBN in the run and `fedpath adapt-bn` on its file leave that layer
    over, final, run_dir = _run(
        tmp_path,
        "evaluation.adapt_bn=true",
        "train.trainable=last_stages",
        "train.trainable_stages=1",
    )
    src = run_dir / "model.fpm"
    meta, original = read_model_file(src)
    assert meta.bn_fixed == ["encoder.stages.0.1"]
    scored = load_dataset(load_config(None, over).data).split("hospital_2", "all")
    model = load_model(src).model
    adapt_on_split(model, scored, 64, torch.device("cpu"), meta.bn_fixed)
    p = predict_probs(model, scored, 64, torch.device("cpu")).double().numpy()
    want = classification_metrics(scored.labels, p)
    got = final["adapted"]["target"]
    assert got["auroc"] == pytest.approx(want["auroc"], abs=1e-9)
    assert got["ece"] == pytest.approx(want["ece"], abs=1e-9)
    folder = tmp_path / "site"
    folder.mkdir()
    for i, im in enumerate(scored.load(np.arange(len(scored)))):
        Image.fromarray(im.permute(1, 2, 0).numpy()).save(folder / f"{i:03d}.png")
    frozen, trained = (
        "encoder.stages.0.1.running_mean",
        "encoder.stages.1.1.running_mean",
    )
    for extra, layers, stage0_kept in (
        ([], "trained", True),
        (["--all-layers"], "all", False),
    ):
        out = tmp_path / f"adapted_{layers}.fpm"
        argv = ["adapt-bn", str(src), str(folder), "--out", str(out), *extra]
        assert main(argv) == 0
        said = capsys.readouterr().out
        assert ("1 layers of its frozen stages kept" in said) == stage0_kept
        new_meta, weights = read_model_file(out)
        assert new_meta.adapted_bn["layers"] == layers
        assert new_meta.bn_fixed == meta.bn_fixed  # the adapted file says it too
        assert torch.equal(weights[frozen], original[frozen]) == stage0_kept
        assert not torch.equal(weights[trained], original[trained])
