"""The local and Ray loops (fedpath.runtime.launch_pools): results in the specs'
order, the workers' events passed on, and Ray's absence named. The byte-equality
of their runs with the serial suite's is tests/runtime/test_launch.py's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from fedpath.errors import ConfigError
from fedpath.runtime.launch_pools import import_ray, run_local
from fedpath.runtime.launch_worker import CellResult, CellSpec, Event


def _failing_spec(index: int, tmp_path: Path) -> CellSpec:
    """A cell whose config is refused at once: a worker's cheapest whole job."""
    return CellSpec(
        index=index,
        config={"algorithm": {"name": f"missing{index}"}},
        target="hospital_0",
        seed=0,
        run_dir=str(tmp_path / f"c{index}"),
        resume=False,
        cwd=os.getcwd(),
        env={},
        threads=1,
    )


def test_local_workers_return_results_in_spec_order(tmp_path: Path) -> None:
    specs = [_failing_spec(i, tmp_path) for i in (3, 1)]
    events: list[Event] = []
    ended: list[CellResult] = []
    results = run_local(specs, 1, events.append, ended.append)  # one spawn: cheap
    assert [r.index for r in results] == [3, 1]
    assert all(not r.ok and r.kind == "ConfigError" for r in results)
    assert "missing3" in results[0].error and "missing1" in results[1].error
    assert sorted(r.index for r in ended) == [1, 3]  # each once, as it ended
    begun = sorted(ev[1] for ev in events if ev[0] == "begin")
    assert begun == [1, 3]  # the workers' events reached the driver
    assert all(ev[2] != os.getpid() for ev in events)  # from other processes


def test_ray_missing_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'fedpath\[ray\]'"):
        import_ray()
