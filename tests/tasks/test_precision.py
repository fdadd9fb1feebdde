"""runtime.device and runtime.precision: the GPU path, checked where it can be
(bf16 autocast runs on CPU too; a missing GPU is a clear error)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedpath.config import ConfigError, load_config
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks import make_task
from fedpath.tasks.images import fit_images
from tests.conftest import tiny_overrides


def _task(tmp_path: Path, *extra: str):  # type: ignore[no-untyped-def]
    cfg = load_config(None, tiny_overrides(tmp_path, *extra))
    ds = load_dataset(cfg.data)
    return cfg, ds, make_task(cfg, ds)


def test_bf16_runs_the_encoder_in_bf16_and_everything_else_in_float32(
    tmp_path: Path,
) -> None:
    _, ds, task = _task(tmp_path, "runtime.precision=bf16")
    _, _, plain = _task(tmp_path)
    torch.manual_seed(0)
    model = task.build_model()
    ref = plain.build_model()
    ref.load_state_dict(model.state_dict())
    assert model.autocast is torch.bfloat16 and ref.autocast is None

    conv_out: list[torch.dtype] = []
    first_conv = next(
        m for m in model.encoder.modules() if isinstance(m, torch.nn.Conv2d)
    )
    first_conv.register_forward_hook(lambda m, i, o: conv_out.append(o.dtype))
    hook_in: list[torch.dtype] = []

    def hook(stage: int, fmap: torch.Tensor) -> torch.Tensor:
        hook_in.append(fmap.dtype)
        return fmap * 1.0

    x = ds.store.load(np.arange(8)).float() / 255
    model.eval()
    ref.eval()
    with torch.no_grad():
        z = model.encode(x, hook)
        logits, want = model(x), ref(x)
    assert conv_out[0] == torch.bfloat16  # the convolutions ran in bf16...
    assert z.dtype == torch.float32 and logits.dtype == torch.float32
    assert set(hook_in) == {torch.float32}  # ...feature statistics do not
    assert all(m.dtype == torch.float32 for m in model.feature_maps(x))
    # bf16 keeps about 3 significant digits: close to, not equal to, float32
    assert not torch.equal(logits, want)
    torch.testing.assert_close(logits, want, atol=0.05, rtol=0.05)

    # and it trains: finite losses, weights move, the caller's model is float32
    data = ds.split(ds.domains[0], "train")
    before = model.classifier.weight.detach().clone()

    def ce(m, xb, yb):  # type: ignore[no-untyped-def]
        return {"loss": F.cross_entropy(m(xb), yb)}

    out = fit_images(
        model, data, ce, task.train, round_idx=1, seed=0, device=task.device
    )
    assert np.isfinite(out["loss"])
    assert not torch.equal(before, model.classifier.weight)
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_gpu_that_is_not_there_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"runtime\.device.*'cuda'.*no CUDA GPU"):
        _task(tmp_path, "runtime.device=cuda")


def test_device_and_precision_are_checked_when_loaded(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"runtime\.device.*'cpu', 'cuda'"):
        load_config(None, tiny_overrides(tmp_path, "runtime.device=gpu"))
    with pytest.raises(ConfigError, match=r"runtime\.precision"):
        load_config(None, tiny_overrides(tmp_path, "runtime.precision=fp16"))
    ok = load_config(None, tiny_overrides(tmp_path, "runtime.device=cuda:1"))
    assert ok.runtime.device == "cuda:1"
