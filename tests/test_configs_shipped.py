"""Every config and suite shipped in configs/ and fedpath/configs/ validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.config import load_config
from fedpath.runtime.suite import load_suite
from fedpath.utils.yaml_io import read_yaml_mapping

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted([*ROOT.glob("configs/**/*.yaml"), *ROOT.glob("fedpath/configs/*.yaml")])


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_config_validates(path: Path) -> None:
    if "variants" in read_yaml_mapping(path):
        _, configs = load_suite(path)
        assert configs and len({c.method for c in configs}) == len(configs)
    else:
        cfg = load_config(path)
        assert cfg.train.rounds >= 1


def test_paper_tables_match_the_paper() -> None:
    for name, batch in (("camelyon17", 32), ("mvmidog", 16)):
        for net in ("resnet18", "resnet50"):
            cfg = load_config(ROOT / "configs" / "paper" / f"{name}_{net}.yaml")
            t = cfg.train
            assert (t.rounds, t.local_epochs, t.batch_size) == (3, 3, batch)
            assert (t.schedule, t.lr, t.lr_end) == ("linear", 1e-4, 2.5e-6)
            assert (cfg.partition.alpha, cfg.partition.clients_per_domain) == (0.5, 2)
            assert cfg.algorithm.params["upload_ratio"] == 0.1
            assert cfg.model.backbone == net
