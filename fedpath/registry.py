"""A small named registry: ``@REGISTRY.register("name")`` and ``REGISTRY.get("name")``.

Every pluggable piece of fedpath (datasets, backbones, algorithms) is found by name
through one of these, so adding a method means writing one file, never editing an
``if name == ...`` chain.

The built-in entries register themselves when their plugin modules are imported,
and those import PyTorch. Validating a config only needs the names and the params
dataclasses, so until the plugins are loaded a registry answers :meth:`~Registry.names`,
``in`` and :meth:`~Registry.params` from ``fedpath/catalog.json`` (generated from
the live registries, see :mod:`fedpath.catalog`), whose params classes live in
torch-free modules (:mod:`fedpath.params`). An entry may also carry declared
facts (an algorithm's wire facts, :mod:`fedpath.wire`), answered the same way
by :meth:`~Registry.facts`.

A registry whose plugins are packages (``discover=True``) counts every module of
them as a plugin: a module the catalog has not seen (a new algorithm's file)
means the catalog lacks its entries, so the registry loads the plugins instead
of answering from the catalog. A new built-in thus works before the catalog is
regenerated; the catalog stays the fast path.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from fedpath.errors import UnknownNameError

if TYPE_CHECKING:  # types only: the registries' users import this module
    from fedpath.algorithms.base import AlgorithmSpec
    from fedpath.data.base import DomainDataset
    from fedpath.mil.models import MILFactory
    from fedpath.models.backbones import FedModel

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """A registered object plus the dataclass of its tunable parameters (or None)
    and its declared facts (JSON-like; None: none declared)."""

    name: str
    obj: T
    params: type | None
    doc: str
    facts: dict[str, Any] | None = None


#: the catalog's section listing, per kind, the plugin modules it was made from
MODULES = "modules"


@functools.cache
def shipped_catalog() -> dict[str, dict[str, Any]]:
    """``fedpath/catalog.json``: kind -> name -> ``{"doc", "params"[, "facts"]}``,
    plus :data:`MODULES`: kind -> plugin modules; read once."""
    text = resources.files("fedpath").joinpath("catalog.json").read_text("utf-8")
    data: dict[str, dict[str, Any]] = json.loads(text)
    return data


@functools.cache
def plugin_modules(plugins: tuple[str, ...]) -> tuple[str, ...]:
    """``plugins`` and, for those that are packages, every module in them, sorted;
    found with pkgutil without importing any of them (no PyTorch)."""
    out = set(plugins)
    for name in plugins:
        spec = importlib.util.find_spec(name)
        where = spec.submodule_search_locations if spec is not None else None
        if where:
            out.update(f"{name}.{m.name}" for m in pkgutil.iter_modules(list(where)))
    return tuple(sorted(out))


def import_path(path: str) -> type:
    """The class named by ``"module:QualName"`` (as ``catalog.json`` records it)."""
    module, _, qualname = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """Maps names to objects of one kind (``what`` names the kind in error messages).

    ``plugins``: modules whose import registers the built-in entries; they are
    imported by name on the first lookup that needs a registered object
    (:meth:`get`, :meth:`entry`; see :meth:`_load_plugins`). ``catalog_kind``:
    this registry's section of ``fedpath/catalog.json``; with it, :meth:`names`,
    ``in``, :meth:`params` and :meth:`facts` answer from the entries registered
    so far and then the catalog, without importing the plugins, until something
    loads them. ``discover``: the plugins are packages whose every module is a
    plugin (the package imports them); a module the catalog does not list makes
    the registry load the plugins rather than trust the catalog.
    """

    def __init__(
        self,
        what: str,
        plugins: tuple[str, ...] = (),
        catalog_kind: str | None = None,
        discover: bool = False,
    ) -> None:
        self.what = what
        self.plugins = plugins
        self.catalog_kind = catalog_kind
        self.discover = discover
        self._loaded = not plugins
        self._entries: dict[str, Entry[T]] = {}

    def register(
        self,
        name: str,
        params: type | None = None,
        doc: str | None = None,
        facts: dict[str, Any] | None = None,
    ) -> Callable[[T], T]:
        """Decorator registering ``obj`` as ``name``, with an optional params class
        and optional declared facts (JSON-like, recorded in the catalog).

        The entry's one-line summary (``fedpath list``) is the first line of
        ``doc``, else of ``obj.summary`` or ``obj.__doc__``; pass ``doc`` when
        ``obj`` carries no docstring of its own (a ``functools.partial``).
        """

        def deco(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.what} {name!r} is registered twice")
            text = doc or getattr(obj, "summary", None) or getattr(obj, "__doc__", None)
            lines = (text or "").strip().splitlines()
            summary = lines[0] if lines else ""
            self._entries[name] = Entry(name, obj, params, summary, facts)
            return obj

        return deco

    def unregister(self, name: str) -> None:
        """Remove ``name`` (plugins and tests that register temporary entries)."""
        self._entries.pop(name, None)

    def _load_plugins(self) -> None:
        """Import the built-in plugin modules once, on the first lookup.

        They are imported by module name, the way third-party entry points are:
        the plugins import this module to register themselves, so a static import
        here would close an import circle, and importing lazily keeps
        ``import fedpath`` (and ``fedpath --help``) cheap.
        """
        if self._loaded:
            return
        self._loaded = True
        for module in self.plugins:
            importlib.import_module(module)

    def _catalog(self) -> dict[str, dict[str, Any]] | None:
        """The catalog's entries of this registry while the plugins are not loaded
        (None once they are, or without a ``catalog_kind``: ask the entries)."""
        if self._loaded or self.catalog_kind is None:
            return None
        catalog = shipped_catalog()
        if self.discover:
            seen = catalog.get(MODULES, {}).get(self.catalog_kind, [])
            if set(plugin_modules(self.plugins)) - set(seen):
                # a plugin module newer than the catalog: its entries are not
                # in it, so ask the plugins themselves
                self._load_plugins()
                return None
        section: dict[str, dict[str, Any]] = catalog[self.catalog_kind]
        return section

    def entry(self, name: str) -> Entry[T]:
        self._load_plugins()
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(
                f"unknown {self.what} {name!r}; known: {', '.join(self.names())}"
            ) from None

    def get(self, name: str) -> T:
        return self.entry(name).obj

    def entries(self) -> list[Entry[T]]:
        """Every entry, the plugins' included (loads them), sorted by name."""
        self._load_plugins()
        return [self._entries[n] for n in sorted(self._entries)]

    def params(self, name: str) -> type | None:
        """The params dataclass of ``name`` (None: it takes no parameters)."""
        if name in self._entries:
            return self._entries[name].params
        catalog = self._catalog()
        if catalog is not None and name in catalog:
            path = catalog[name]["params"]
            return None if path is None else import_path(path)
        return self.entry(name).params

    def facts(self, name: str) -> dict[str, Any] | None:
        """The declared facts of ``name`` (None: it declares none)."""
        if name in self._entries:
            return self._entries[name].facts
        catalog = self._catalog()
        if catalog is not None and name in catalog:
            facts: dict[str, Any] | None = catalog[name].get("facts")
            return facts
        return self.entry(name).facts

    def names(self) -> list[str]:
        catalog = self._catalog()
        if catalog is not None:
            return sorted({*self._entries, *catalog})
        self._load_plugins()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        if name in self._entries:
            return True
        catalog = self._catalog()
        if catalog is not None:
            return name in catalog
        self._load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


# ----------------------------------------------------------------- the registries
# They live here, below everything that registers into them or looks them up, so
# the config loader can check names without importing the algorithms.

#: ``factory(params, root) -> DomainDataset``
DATASETS: Registry[Callable[[Any, str | None], DomainDataset]] = Registry(
    "dataset", plugins=("fedpath.data",), catalog_kind="datasets"
)
#: ``factory(params, num_classes) -> FedModel``
BACKBONES: Registry[Callable[..., FedModel]] = Registry(
    "backbone", plugins=("fedpath.models",), catalog_kind="backbones"
)
#: ``factory(params, in_dim, num_classes) -> MILModel``
MIL_MODELS: Registry[MILFactory] = Registry(
    "mil model",
    plugins=("fedpath.mil.models_attention", "fedpath.mil.transmil"),
    catalog_kind="mil",
)
#: registered algorithms; ``ALGORITHMS.params(name)`` is the params dataclass
#: and ``ALGORITHMS.facts(name)`` its wire facts (:mod:`fedpath.wire`); every
#: module of ``fedpath.algorithms`` is a plugin (a new file is found without
#: editing any list)
ALGORITHMS: Registry[AlgorithmSpec] = Registry(
    "algorithm",
    plugins=("fedpath.algorithms",),
    catalog_kind="algorithms",
    discover=True,
)


def describe(registry: Registry[Any]) -> list[tuple[str, str]]:
    """(name, first docstring line) of every entry, for ``fedpath list``."""
    return [(e.name, e.doc) for e in registry.entries()]
