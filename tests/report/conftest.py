"""The runs the report tests read: a tiny suite (FedAvg and FedStain, two held-out
hospitals, two seeds) and a FedHD and a FedAD demo run, each trained once per
test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.cli import main
from tests.conftest import TINY


@pytest.fixture(scope="session")
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


@pytest.fixture(scope="session")
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
