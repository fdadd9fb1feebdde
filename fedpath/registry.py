"""A small named registry: ``@REGISTRY.register("name")`` and ``REGISTRY.get("name")``.

Every pluggable piece of fedpath (datasets, backbones, algorithms) is found by name
through one of these, so adding a method means writing one file, never editing an
``if name == ...`` chain.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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


class Registry(Generic[T]):
    """Maps names to objects of one kind (``what`` names the kind in error messages).

    ``plugins``: modules whose import registers the built-in entries; they are
    imported by name on the first lookup (see :meth:`_load_plugins`).
    """

    def __init__(self, what: str, plugins: tuple[str, ...] = ()) -> None:
        self.what = what
        self.plugins = plugins
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

    def params(self, name: str) -> type | None:
        return self.entry(name).params

    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


# ----------------------------------------------------------------- the registries
# They live here, below everything that registers into them or looks them up, so
# the config loader can check names without importing the algorithms.

#: ``factory(params, root) -> DomainDataset``
DATASETS: Registry[Callable[[Any, str | None], DomainDataset]] = Registry(
    "dataset", plugins=("fedpath.data",)
)
#: ``factory(params, num_classes) -> FedModel``
BACKBONES: Registry[Callable[..., FedModel]] = Registry(
    "backbone", plugins=("fedpath.models",)
)
#: ``factory(params, in_dim, num_classes) -> MILModel``
MIL_MODELS: Registry[MILFactory] = Registry(
    "mil model", plugins=("fedpath.mil.models_attention", "fedpath.mil.transmil")
)
#: registered algorithms; ``ALGORITHMS.params(name)`` is the params dataclass
ALGORITHMS: Registry[AlgorithmSpec] = Registry(
    "algorithm", plugins=("fedpath.algorithms",)
)


def describe(registry: Registry[Any]) -> list[tuple[str, str]]:
    """(name, first docstring line) of every entry, for ``fedpath list``."""
    return [(n, registry.entry(n).doc) for n in registry.names()]
