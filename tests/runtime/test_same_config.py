"""A run against the config asked for now: :mod:`fedpath.runtime.same_config`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedpath.config import load_config
from fedpath.errors import ResumeError
from fedpath.runtime.persistence import load_checkpoint, save_checkpoint
from fedpath.runtime.same_config import check_same_config
from tests.conftest import tiny_overrides
from tests.runtime.conftest import make_checkpoint


def test_an_option_added_since_the_run_at_its_default_keeps_its_results(
    tmp_path: Path,
) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path))
    saved = cfg.to_dict()
    del saved["evaluation"]["expected"]  # the run predates evaluation.expected
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    final = {"config_hash": "the hash before the option existed"}
    check_same_config(tmp_path, final, cfg, cfg.hash())  # at its default: stands
    changed = cfg.replace(**{"evaluation.expected": ["a", "b"]})
    with pytest.raises(ResumeError, match=r"differing keys: evaluation.expected\)"):
        check_same_config(tmp_path, final, changed, changed.hash())
    both = cfg.replace(**{"train.lr": 0.5})  # a real difference beside it
    with pytest.raises(ResumeError, match=r"evaluation.expected, train.lr\)"):
        check_same_config(tmp_path, final, both, both.hash())
    # an interrupted run resumes from its checkpoint by the same rule
    save_checkpoint(
        tmp_path, make_checkpoint(), "the hash before the option existed", "t", 0
    )
    assert load_checkpoint(tmp_path, cfg.hash(), cfg) is not None
    with pytest.raises(ResumeError, match="different config"):
        load_checkpoint(tmp_path, both.hash(), both)


def test_asking_for_other_seeds_keeps_a_finished_seed_but_not_other_changes(
    tmp_path: Path,
) -> None:
    cfg = load_config(None, [*tiny_overrides(tmp_path), "seeds=[0,1,2,3,4]"])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    final = {"config_hash": cfg.hash()}
    fewer = cfg.replace(seeds=[0, 1])
    assert fewer.hash() != cfg.hash()
    check_same_config(tmp_path, final, fewer, fewer.hash())  # the run stands
    save_checkpoint(tmp_path, make_checkpoint(), cfg.hash(), "t", 0)
    assert load_checkpoint(tmp_path, fewer.hash(), fewer) is not None
    both = fewer.replace(**{"train.lr": 0.5})
    with pytest.raises(ResumeError, match=r"differing keys: seeds, train.lr\)"):
        check_same_config(tmp_path, final, both, both.hash())
