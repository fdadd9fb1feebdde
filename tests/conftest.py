"""Shared fixtures: a tiny synthetic federation that trains in about a second."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from fedpath.config import ExperimentConfig, load_config

torch.set_num_threads(1)

try:  # the property tests of the readers (tests/test_reader_properties.py)
    from hypothesis import settings
except ImportError:  # hypothesis is in the dev extra; without it they skip
    pass
else:
    # a fixed example budget per test, no example database on disk, no deadline
    # (a shared CI core is slow by moments); under CI=true the examples are
    # derived from each test's name, so every CI run tries the same inputs
    settings.register_profile(
        "fedpath",
        max_examples=40,
        deadline=None,
        database=None,
        derandomize=os.environ.get("CI", "").lower() in ("1", "true"),
        print_blob=False,
    )
    # more examples, when looking for bugs: pytest --hypothesis-profile=thorough
    settings.register_profile(
        "thorough", settings.get_profile("fedpath"), max_examples=1000
    )
    settings.load_profile("fedpath")

TINY = [
    "data.params.num_hospitals=3",
    "data.params.samples_per_hospital=48",
    "data.params.image_size=32",
    "data.params.slides_per_hospital=4",
    "model.params.widths=[8,16]",
    "train.rounds=2",
    "train.local_epochs=1",
    "train.batch_size=16",
    "train.eval_batch_size=64",
    "seeds=[0]",
    "runtime.threads=null",
]


def tiny_overrides(tmp_path: Path, *extra: str) -> list[str]:
    return [*TINY, f"output_dir={tmp_path}", *extra]


@pytest.fixture
def benchmark_script(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    """Import ``benchmarks/<name>.py`` by its name (the folder is on ``sys.path``
    for the test, as when the script runs)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    return importlib.import_module


@pytest.fixture
def tiny_cfg(tmp_path: Path) -> ExperimentConfig:
    return load_config(None, tiny_overrides(tmp_path))


#: the real AMi-Br crops (docs/data/amibr.md), for the few tests that use them; they
#: skip when FEDPATH_AMIBR is unset
AMIBR = Path(os.environ.get("FEDPATH_AMIBR", "amibr-not-set"))


@pytest.fixture
def task_identity() -> Iterator[None]:
    """Messages built outside a Flower process need a run and node identity (the
    Flower tests; ``flwr`` is imported here, when a test asks for it: without it
    the test skips)."""
    TaskIdentity = pytest.importorskip("flwr.supercore.task_identity").TaskIdentity

    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder per test module, for tests whose examples rewrite files in one
    place (the property tests of the readers)."""
    return tmp_path_factory.mktemp("garbage")
