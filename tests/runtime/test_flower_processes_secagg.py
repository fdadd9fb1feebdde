"""SecAgg+ over Flower's deployment engine: a SuperLink and two SuperNodes started
as processes on loopback (each with fedpath's node worker), the run launched with
``flwr run`` and ``secure-aggregation = "secaggplus"``. The global model equals
plain in-process FedAvg within the quantization bound of
:func:`fedpath.runtime.secagg.error_bound`, and the SuperLink's log shows the
SecAgg+ stages went through it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr")

from fedpath.runtime.secagg import RC_MODE, SecAggSettings, error_bound
from tests.flower_helpers import (
    Federation,
    config,
    final_state,
    in_process,
    records,
    run_logs,
    start_federation,
)

CLIENTS = ["hospital_0/c0", "hospital_1/c0"]
#: the run config that turns SecAgg+ on (Federation.run takes any config values)
SECAGGPLUS: dict[str, Any] = {RC_MODE: "secaggplus"}
ONE_ROUND = "train.rounds=1"


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    fed = start_federation(tmp_path_factory.mktemp("secagg_processes"), CLIENTS)
    yield fed
    fed.stop()


@pytest.mark.slow
def test_secaggplus_round_over_processes_equals_plain_within_the_bound(
    federation: Federation, tmp_path: Path
) -> None:
    cfg = config(tmp_path / "flower", ONE_ROUND)
    run_id = federation.run(cfg, **SECAGGPLUS)
    assert records(cfg, "failure") == []
    reference = in_process(tmp_path, ONE_ROUND)
    secure, plain = final_state(cfg), final_state(reference)
    floats = [k for k in plain if plain[k].is_floating_point()]
    diff = max(
        float((secure[k].double() - plain[k].double()).abs().max()) for k in floats
    )
    # the bound for two clients whatever their example counts (the worst case,
    # D = 1: one client's weight rounds to the full step, the other's to 0)
    s = SecAggSettings()
    top = max(float(plain[k].abs().max()) for k in floats)
    bound = error_bound([1.0, 0.0], 1.0, s.clipping_range, s.quantization_range, top)
    print(f"SecAgg+ over processes vs plain: max |diff| {diff:.3g}, bound {bound:.3g}")
    assert 0 < diff <= bound  # > 0: the aggregate came through the quantizer
    assert bound < 2e-5
    logs = run_logs(run_id, federation.connection, federation.home)
    assert "secure aggregation: SecAgg+ on the fit stage" in logs, logs[-2000:]
