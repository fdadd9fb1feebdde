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
from tests.runtime.test_persistence import _ckpt


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
    save_checkpoint(tmp_path, _ckpt(), "the hash before the option existed", "t", 0)
    assert load_checkpoint(tmp_path, cfg.hash(), cfg) is not None
    with pytest.raises(ResumeError, match="different config"):
        load_checkpoint(tmp_path, both.hash(), both)
