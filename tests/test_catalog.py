"""catalog.json records each algorithm's wire facts and the algorithm modules it
was made from; a change to either makes ``--check`` fail."""

from __future__ import annotations

import pytest

from fedpath import catalog, registry


def test_the_catalog_records_facts_and_modules() -> None:
    shipped = catalog.load()
    modules = shipped[registry.MODULES]["algorithms"]
    assert modules == list(registry.plugin_modules(("fedpath.algorithms",)))
    assert "fedpath.algorithms.fedavg" in modules
    assert all("facts" in e for e in shipped["algorithms"].values())
    assert not any("facts" in e for e in shipped["datasets"].values())
    assert shipped["algorithms"]["fedbn"]["facts"]["secagg"] == "examples"
    assert "modules" not in catalog.render(shipped)


def test_check_fails_on_changed_facts_or_modules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    live = catalog.collect()
    assert catalog.main(["--check"]) == 0
    changed = {**live, "algorithms": dict(live["algorithms"])}
    fedavg = dict(changed["algorithms"]["fedavg"])
    fedavg["facts"] = {**fedavg["facts"], "secagg": None}
    changed["algorithms"]["fedavg"] = fedavg
    monkeypatch.setattr(catalog, "collect", lambda: changed)
    assert catalog.main(["--check"]) == 1
    added = {**live, registry.MODULES: {"algorithms": [*modules(live), "x.new"]}}
    monkeypatch.setattr(catalog, "collect", lambda: added)
    assert catalog.main(["--check"]) == 1


def modules(live: catalog.Catalog) -> list[str]:
    out: list[str] = live[registry.MODULES]["algorithms"]
    return out
