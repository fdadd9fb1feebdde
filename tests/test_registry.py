"""The registry: entries registered at run time come first, then the catalog,
and a plugin module the catalog has not seen makes it load the plugins (a new
algorithm works before the catalog is regenerated)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fedpath import registry
from fedpath.registry import Registry, UnknownNameError

#: the registry the temporary plugin package registers into
REG: Registry[object] = Registry(
    "thing", plugins=("toyplugins",), catalog_kind="things", discover=True
)
CATALOG: dict[str, dict[str, Any]] = {
    "things": {"old": {"doc": "an old thing", "params": None, "facts": {"a": 1}}},
    registry.MODULES: {"things": ["toyplugins", "toyplugins.old"]},
}


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    pkg = tmp_path / "toyplugins"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import importlib, pkgutil\n"
        "for m in pkgutil.iter_modules(__path__):\n"
        "    importlib.import_module(f'{__name__}.{m.name}')\n"
    )
    (pkg / "old.py").write_text(
        "from tests.test_registry import REG\n"
        "REG.register('old', facts={'a': 1})(object())\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "shipped_catalog", lambda: CATALOG)
    registry.plugin_modules.cache_clear()
    REG._loaded, REG._entries = False, {}
    yield pkg
    registry.plugin_modules.cache_clear()
    for name in [m for m in sys.modules if m.split(".")[0] == "toyplugins"]:
        del sys.modules[name]


def test_the_catalog_answers_while_it_has_seen_every_module(plugins: Path) -> None:
    assert REG.names() == ["old"] and "old" in REG and "new" not in REG
    assert REG.facts("old") == {"a": 1} and REG.params("old") is None
    assert not REG._loaded and "toyplugins" not in sys.modules


def test_a_new_plugin_module_is_found_without_the_catalog(plugins: Path) -> None:
    (plugins / "new.py").write_text(
        "from tests.test_registry import REG\nREG.register('new')(object())\n"
    )
    assert "new" in REG  # the unseen module made the registry load the plugins
    assert REG._loaded and REG.names() == ["new", "old"]
    assert REG.facts("new") is None and REG.facts("old") == {"a": 1}


def test_unknown_names_list_the_known_ones(plugins: Path) -> None:
    with pytest.raises(UnknownNameError, match="unknown thing 'nope'; known: old"):
        REG.get("nope")
    with pytest.raises(ValueError, match="registered twice"):
        REG.register("old")(object())
