"""FedHD's distance guard: no shared token sits on a real patch embedding, and
slides too small to hide are not distilled."""

from __future__ import annotations

from pathlib import Path

import torch

from fedpath.config import load_config
from fedpath.mil.bags import SlideBag
from fedpath.mil.privacy import guard_tokens, reference_spacing
from fedpath.runtime.experiment import run_dir_for, run_experiment
from fedpath.utils.io import read_jsonl
from tests.mil_helpers import FEDHD, TINY


def _bag(x: torch.Tensor, name: str) -> SlideBag:
    return SlideBag(name, x, 1, "h0")


def test_reference_spacing_is_the_median_nearest_patch_gap() -> None:
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]])  # gaps 1, 1, 2
    assert reference_spacing([_bag(x, "s")]) == 1.0


def test_tokens_on_real_patches_are_pushed_to_the_floor() -> None:
    torch.manual_seed(0)
    real = torch.randn(6, 8)
    ref = reference_spacing([_bag(real, "r")])
    # the failure the guard exists for: tokens at 1e-3 of real patches
    tokens = torch.cat(
        [real[:2] + 1e-3 * torch.randn(2, 8), real[:1], 5 + torch.randn(3, 8)]
    )
    out, report = guard_tokens([_bag(tokens, "syn")], [_bag(real, "r")], 0.5, seed=0)
    d = torch.cdist(out[0].features, real).min(1).values
    assert (d >= 0.5 * ref * 0.999).all()
    assert report["tokens_moved"] >= 3 and report["nn_ratio_min"] >= 0.5
    far = torch.cdist(tokens[3:], real).min(1).values
    torch.testing.assert_close(d[3:], far)  # tokens already far stay put
    _, off = guard_tokens([_bag(tokens, "syn")], [_bag(real, "r")], 0.0, seed=0)
    assert off["nn_ratio_min"] < 0.01  # without the guard the copy is reported


def test_fedhd_withholds_small_slides_and_reports_the_ratio(tmp_path: Path) -> None:
    cfg = load_config(
        None,
        [*TINY, *FEDHD, f"output_dir={tmp_path}", "algorithm.params.min_patches=10000"],
    )
    run_experiment(cfg)
    rows = list(read_jsonl(run_dir_for(cfg, "none", 0) / "results.jsonl"))
    rnd = next(r for r in rows if r["kind"] == "round")
    assert rnd["distill/synthetic_slides"] == 0  # every slide too small: none shared
    withheld = [v for k, v in rnd.items() if k.startswith("distill/slides_withheld/")]
    assert withheld and all(v > 0 for v in withheld)

    cfg = load_config(None, [*TINY, *FEDHD, f"output_dir={tmp_path / 'b'}"])
    run_experiment(cfg)
    rows = list(read_jsonl(run_dir_for(cfg, "none", 0) / "results.jsonl"))
    rnd = next(r for r in rows if r["kind"] == "round")
    ratios = [v for k, v in rnd.items() if k.startswith("distill/nn_ratio_min/")]
    assert ratios and min(ratios) >= 0.5
