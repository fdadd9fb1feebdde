"""A small named registry: ``@REGISTRY.register("name")`` and ``REGISTRY.get("name")``.

Every pluggable piece of fedpath (datasets, backbones, algorithms) is found by name
through one of these, so adding a method means writing one file, never editing an
``if name == ...`` chain.

The built-in entries register themselves when their plugin modules are imported,
and those import PyTorch. Validating a config only needs the names and the params
dataclasses, so until the plugins are loaded a registry answers :meth:`~Registry.names`,
``in`` and :meth:`~Registry.params` from ``fedpath/catalog.json`` (generated from
the live registries, see :mod:`fedpath.catalog`), whose params classes live in
torch-free modules (:mod:`fedpath.params`).
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:  # types only: the registries' users import this module
    from fedpath.algorithms.base import AlgorithmSpec
    from fedpath.data.base import DomainDataset
    from fedpath.mil.models import MILFactory
    from fedpath.models.backbones import FedModel

T = TypeVar("T")


class UnknownNameError(KeyError):
    """Raised when a name is not registered; the message lists the known names."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


@dataclass(frozen=True)
class Entry(Generic[T]):
    """A registered object plus the dataclass of its tunable parameters (or None)."""

    name: str
    obj: T
    params: type | None
    doc: str


@functools.cache
def shipped_catalog() -> dict[str, dict[str, dict[str, Any]]]:
    """``fedpath/catalog.json``: kind -> name -> ``{"doc", "params"}``, read once."""
    text = resources.files("fedpath").joinpath("catalog.json").read_text("utf-8")
    data: dict[str, dict[str, dict[str, Any]]] = json.loads(text)
    return data


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
    ``in`` and :meth:`params` answer from the entries registered so far and then
    the catalog, without importing the plugins, until something loads them.
    """

    def __init__(
        self, what: str, plugins: tuple[str, ...] = (), catalog_kind: str | None = None
    ) -> None:
        self.what = what
        self.plugins = plugins
        self.catalog_kind = catalog_kind
        self._loaded = not plugins
        self._entries: dict[str, Entry[T]] = {}

    def register(
        self, name: str, params: type | None = None, doc: str | None = None
    ) -> Callable[[T], T]:
        """Decorator registering ``obj`` as ``name``, with an optional params class.

        The entry's one-line summary (``fedpath list``) is the first line of
        ``doc``, else of ``obj.summary`` or ``obj.__doc__``; pass ``doc`` when
        ``obj`` carries no docstring of its own (a ``functools.partial``).
        """

        def deco(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.what} {name!r} is registered twice")
            text = doc or getattr(obj, "summary", None) or getattr(obj, "__doc__", None)
            lines = (text or "").strip().splitlines()
            self._entries[name] = Entry(name, obj, params, lines[0] if lines else "")
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
        return shipped_catalog()[self.catalog_kind]

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
ALGORITHMS: Registry[AlgorithmSpec] = Registry(
    "algorithm", plugins=("fedpath.algorithms",), catalog_kind="algorithms"
)


def describe(registry: Registry[Any]) -> list[tuple[str, str]]:
    """(name, first docstring line) of every entry, for ``fedpath list``."""
    return [(e.name, e.doc) for e in registry.entries()]
