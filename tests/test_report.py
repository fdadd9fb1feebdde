"""fedpath report: the page's tables equal final.json, its figures are drawn (and
deterministic), and it opens in a real browser without errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from fedpath.artifact import load_model
from fedpath.cli import main
from fedpath.report import write_report
from fedpath.report.browser import check_page, find_chromium
from fedpath.report.fig_gradcam import cam_panel, gradcam, last_conv
from fedpath.report.fig_tsne import embed
from fedpath.report.runs import find_experiments
from fedpath.report.samples import run_samples
from tests.conftest import TINY


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FedAvg and FedStain, two held-out hospitals, two seeds (8 tiny runs)."""
    tmp = tmp_path_factory.mktemp("report")
    (tmp / "base.yaml").write_text(
        "name: rep\nlodo:\n  targets: [hospital_0, hospital_1]\nalgorithm:\n"
        "  name: fedavg\n"
    )
    (tmp / "suite.yaml").write_text(
        "base: base.yaml\nvariants:\n  fedavg: []\n"
        '  fedstain: ["algorithm.name=fedstain", "algorithm.params={}"]\n'
    )
    over = [o for o in TINY if not o.startswith("seeds")]
    args = ["suite", str(tmp / "suite.yaml"), *over, "seeds=[0,1]"]
    assert main([*args, f"output_dir={tmp / 'runs'}", "-q"]) == 0
    return tmp / "runs" / "rep"


@pytest.fixture(scope="module")
def other_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A tiny FedHD run (slide bags, per-client table) and a FedAD run (probe)."""
    tmp = tmp_path_factory.mktemp("report_other")
    fedhd = [
        "demo", "fedhd", f"output_dir={tmp}", "seeds=[0]",
        "data.params.slides_per_hospital=8", "data.params.dim=8",
        "data.params.min_patches=30", "data.params.max_patches=40",
        "train.local_epochs=2", "algorithm.params.t0=1", "--methods", "fedhd", "-q",
    ]  # fmt: skip
    assert main(fedhd) == 0
    fedad = [
        "demo", "fedad", f"output_dir={tmp}", "seeds=[0]",
        "data.params.num_hospitals=3", "data.params.samples_per_hospital=32",
        "data.params.image_size=16", "data.params.slides_per_hospital=4",
        "model.params.widths=[4,8]", "train.rounds=2", "train.batch_size=8",
        "lodo.targets=[hospital_2]", "--methods", "fedad", "-q",
    ]  # fmt: skip
    assert main(fedad) == 0
    return sorted(p for p in tmp.iterdir() if p.is_dir())


def _expected(root: Path, metric: str) -> dict[tuple[str, str], float]:
    """(method, target) -> mean over seeds x 100 of final.json's target metric."""
    vals: dict[tuple[str, str], list[float]] = {}
    for f in root.rglob("final.json"):
        rec = json.loads(f.read_text())
        v = rec["evaluation"]["target"][metric]
        vals.setdefault((rec["method"], rec["target"]), []).append(100 * v)
    return {k: float(np.mean(v)) for k, v in vals.items()}


def _cells(html: str, metric: str) -> dict[tuple[str, str], float]:
    table = re.search(
        rf'<table class="results" data-metric="{metric}">(.*?)</table>', html, re.S
    )
    assert table is not None, f"no {metric} table"
    return {
        (m, c): float(v)
        for m, c, v in re.findall(
            r'data-method="([^"]+)" data-column="([^"]+)" data-mean="([^"]+)"',
            table.group(1),
        )
    }


def test_report_tables_equal_final_json(suite_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    info = write_report([suite_dir], out)
    html = out.read_text()
    for metric in ("balanced_accuracy", "auroc"):
        cells = _cells(html, metric)
        want = _expected(suite_dir, metric)
        for key, value in want.items():
            assert cells[key] == pytest.approx(value, abs=1e-9), key
        for method in ("fedavg", "fedstain"):  # Avg = mean of the per-seed means
            avg = np.mean([want[(method, t)] for t in ("hospital_0", "hospital_1")])
            assert cells[(method, "Avg")] == pytest.approx(avg, abs=1e-9)
    # the best of a column is marked; the worst domain is named
    assert 'class="num best"' in html and "Worst domain" in html
    assert {"curves", "stain", "augment", "tsne", "gradcam"} <= set(info.figures)
    assert not info.skipped, info.skipped
    assert "fedstain" in html and "resolved config of fedstain" in html
    assert "http://" not in html and "https://" not in html  # nothing to fetch


def test_tsne_and_gradcam_are_shaped_and_deterministic(suite_dir: Path) -> None:
    (exp,) = find_experiments([suite_dir])
    run = exp.first_run("fedstain")
    assert run is not None and run.model_file is not None
    model = load_model(run.model_file)
    s = run_samples(run, per_domain=10, seed=0)
    assert len(s.images) == 30 and s.unseen.sum() == 10  # 3 hospitals x 10
    assert set(s.domains[s.unseen]) == {run.target}
    a, b = embed("x", model, s, seed=0), embed("x", model, s, seed=0)
    assert a.xy.shape == (30, 2) and np.array_equal(a.xy, b.xy)
    assert np.isfinite(a.xy).all() and a.xy.std(0).min() > 0  # not collapsed
    assert np.array_equal(s.images, run_samples(run, 10, 0).images)
    p1, p2 = cam_panel("x", model, s, 2, 0), cam_panel("x", model, s, 2, 0)
    assert p1.maps.shape == (len(p1.images), 32, 32) and len(p1.images) >= 2
    assert np.array_equal(p1.maps, p2.maps) and np.array_equal(p1.preds, p2.preds)
    assert p1.maps.min() >= 0.0 and p1.maps.max() == pytest.approx(1.0)
    assert (p1.labels == p1.preds)[: min(2, int((p1.labels == p1.preds).sum()))].all()


def test_gradcam_weights_the_last_convolution_by_its_gradient() -> None:
    """Against a hand-written Grad-CAM of a two-layer network."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Sequential(
                nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 5, 3, padding=1)
            )
            self.head = nn.Linear(5, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(x).mean((2, 3)))

    net = Net()
    x = torch.rand(2, 3, 8, 8)
    assert last_conv(net) is net.encoder[2]
    maps, pred = gradcam(net, x)
    a = net.encoder(x).detach().requires_grad_(True)
    logits = net.head(a.mean((2, 3)))
    logits.gather(1, logits.argmax(1)[:, None]).sum().backward()
    assert a.grad is not None
    w = a.grad.mean((2, 3), keepdim=True)
    cam = torch.relu((w * a).sum(1)).detach()
    lo = cam.flatten(1).min(1).values[:, None, None]
    hi = cam.flatten(1).max(1).values[:, None, None]
    want = ((cam - lo) / (hi - lo)).numpy()
    assert np.array_equal(pred, logits.argmax(1).numpy())
    np.testing.assert_allclose(maps, want, atol=1e-5)  # same size: no resampling
    vit_like = nn.Sequential(nn.Conv2d(3, 8, 4, stride=4), nn.Flatten())
    assert last_conv(vit_like) is None


def test_report_of_fedad_and_fedhd_runs(other_dirs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "other.html"
    info = write_report(other_dirs, out)
    html = out.read_text()
    assert "clients x methods" in html  # FedHD's per-client table
    assert re.search(r'data-method="fedhd" data-column="hospital_0/c0"', html)
    assert "ATSA" in html and "fedad" in info.figures  # FedAD's figure
    assert "probe_roc" in info.figures and "probe confusion matrix, fedad" in html
    assert not [s for s in info.skipped if "stain" in s]  # bags: no image figures


def test_report_refuses_paths_without_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["report", str(tmp_path), "--out", str(out)]) == 2
    assert "no run directories" in capsys.readouterr().err
    assert main(["report", str(tmp_path), "--out", str(out), "--images", "0"]) == 2
    assert "--images: expected a positive number" in capsys.readouterr().err
    assert not out.exists()


def test_report_opens_in_chromium(
    suite_dir: Path, other_dirs: list[Path], tmp_path: Path
) -> None:
    if find_chromium() is None:  # `make test` installs it where it can
        pytest.skip(
            "no Chromium here and `make test` could not install it (apt-get "
            "install chromium): the report's browser test is not run"
        )
    for paths, name in (([suite_dir], "suite"), (other_dirs, "other")):
        out = tmp_path / f"{name}.html"
        write_report(paths, out)
        seen = check_page(out)
        assert seen["images"], "no images on the page"
        bad = [i["alt"] for i in seen["images"] if not i["ok"]]
        assert not bad, f"images that did not load: {bad}"
        assert seen["errors"] == [], seen["errors"]
        if name == "suite":
            want = _expected(suite_dir, "balanced_accuracy")
            got = {
                (c["method"], c["column"]): c["mean"]
                for c in seen["cells"]
                if c["table"] == "balanced_accuracy"
            }
            for key, value in want.items():
                assert got[key] == pytest.approx(value, abs=1e-9)
