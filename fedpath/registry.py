"""A small named registry: ``@REGISTRY.register("name")`` and ``REGISTRY.get("name")``.

Every pluggable piece of fedpath (datasets, backbones, algorithms) is found by name
through one of these, so adding a method means writing one file, never editing an
``if name == ...`` chain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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
    """Maps names to objects of one kind (``what`` names the kind in error messages)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, params: type | None = None) -> Callable[[T], T]:
        """Decorator registering ``obj`` as ``name``, with an optional params class."""

        def deco(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.what} {name!r} is registered twice")
            text = getattr(obj, "summary", None) or getattr(obj, "__doc__", None)
            doc = (text or "").strip().splitlines()
            self._entries[name] = Entry(name, obj, params, doc[0] if doc else "")
            return obj

        return deco

    def unregister(self, name: str) -> None:
        """Remove ``name`` (plugins and tests that register temporary entries)."""
        self._entries.pop(name, None)

    def entry(self, name: str) -> Entry[T]:
        _ensure_builtin_plugins()
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
        _ensure_builtin_plugins()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        _ensure_builtin_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


_loaded = False


def _ensure_builtin_plugins() -> None:
    """Import the built-in datasets, backbones and algorithms once, on first lookup.

    Registration happens at import time; importing lazily keeps ``import fedpath``
    cheap and avoids import cycles between the registries and their users.
    """
    global _loaded
    if _loaded:
        return
    _loaded = True
    import fedpath.algorithms
    import fedpath.data
    import fedpath.models  # noqa: F401


def describe(registry: Registry[Any]) -> list[tuple[str, str]]:
    """(name, first docstring line) of every entry, for ``fedpath list``."""
    return [(n, registry.entry(n).doc) for n in registry.names()]
