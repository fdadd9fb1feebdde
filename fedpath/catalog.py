"""What ``fedpath list`` prints, without importing PyTorch.

The registries fill up when their plugin modules are imported, and those modules
import PyTorch (1.5-3 s, ~800 MiB). ``fedpath list`` and ``--help`` should answer
at once, so the built-in entries' names and one-line summaries are also kept in
``catalog.json`` beside this module, generated from the live registries, with
where each entry's params dataclass lives (``"module:QualName"``, a module of
:mod:`fedpath.params` that imports no PyTorch; null: no parameters) and, for
an algorithm, its wire facts (``"facts"``: what each stage sends, SecAgg+ and
DP, the params a hospital's caps bound; :mod:`fedpath.wire`). The registries
answer ``names()``, ``in``, ``params(name)`` and ``facts(name)`` from it until
their plugins are loaded, so validating a config (``fedpath check``) and a
node's policy checks need no PyTorch either. Its ``"modules"`` section lists
the algorithm modules it was made from: a module it does not list (a new
algorithm) makes the registry load the plugins instead, so the file is the fast
path, never a list a new algorithm must be added to:

    python -m fedpath.catalog --write     # after adding or changing a built-in
    python -m fedpath.catalog --check     # exit 1 when catalog.json is stale

A unit test runs the check, so a stale file fails the test command rather than
misleading a user. Entries that a user's own code registers at run time are not
in the file; ``fedpath list --live`` imports the registries and shows them too.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

if TYPE_CHECKING:
    from fedpath.registry import Entry

#: section title -> (registry name in fedpath.registry, what the section holds)
KINDS: dict[str, tuple[str, str]] = {
    "datasets": ("DATASETS", "data.name"),
    "backbones": (
        "BACKBONES",
        "model.backbone for images; also the encoders of `fedpath features`",
    ),
    "mil": ("MIL_MODELS", "model.backbone for slide bags (FedHD and its baselines)"),
    "algorithms": ("ALGORITHMS", "algorithm.name"),
}


class CatalogEntry(TypedDict):
    """One registered name: its one-line summary, its params class (or None) and
    its declared facts, if any (an algorithm's wire facts)."""

    doc: str
    params: str | None
    facts: NotRequired[dict[str, Any]]


#: kind -> name -> entry, and ``"modules"`` -> kind -> the plugin modules seen
Catalog = dict[str, dict[str, Any]]


def params_path(cls: type | None) -> str | None:
    """``"module:QualName"`` of a params class (None for None)."""
    return None if cls is None else f"{cls.__module__}:{cls.__qualname__}"


def collect() -> Catalog:
    """The live registries' entries per kind (imports PyTorch)."""
    from fedpath import registry

    out: Catalog = {}
    modules: dict[str, list[str]] = {}
    for kind, (attr, _) in KINDS.items():
        reg: registry.Registry[Any] = getattr(registry, attr)
        out[kind] = {e.name: entry(e) for e in reg.entries()}
        if reg.discover:
            modules[kind] = list(registry.plugin_modules(reg.plugins))
    out[registry.MODULES] = modules
    return out


def entry(e: Entry[Any]) -> CatalogEntry:
    """The catalog's record of one registry entry."""
    out: CatalogEntry = {"doc": e.doc, "params": params_path(e.params)}
    if e.facts is not None:
        out["facts"] = e.facts
    return out


def load() -> Catalog:
    """The shipped ``catalog.json`` (no PyTorch)."""
    text = resources.files("fedpath").joinpath("catalog.json").read_text("utf-8")
    data: Catalog = json.loads(text)
    return data


def render(catalog: Catalog, what: str = "all") -> str:
    """The text of ``fedpath list [what]``: a header per kind, one line per entry."""
    lines: list[str] = []
    for kind in KINDS:
        if what not in ("all", kind):
            continue
        entries = catalog[kind]
        lines.append(f"{kind} ({KINDS[kind][1]})")
        width = max(map(len, entries), default=0)
        lines.extend(f"  {name:<{width}}  {e['doc']}" for name, e in entries.items())
    return "\n".join(lines)


def _dump(catalog: Catalog) -> str:
    return json.dumps(catalog, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fedpath.catalog", description=__doc__)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate catalog.json")
    mode.add_argument("--check", action="store_true", help="exit 1 when stale")
    args = ap.parse_args(argv)
    live = _dump(collect())
    path = resources.files("fedpath").joinpath("catalog.json")
    if args.write:
        with resources.as_file(path) as p:
            p.write_text(live, encoding="utf-8")
        print(f"wrote {path}")
        return 0
    if path.read_text("utf-8") != live:
        print(
            "fedpath/catalog.json is out of date with the registries (an entry, "
            "its facts or the algorithm modules changed); "
            "run `python -m fedpath.catalog --write`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
