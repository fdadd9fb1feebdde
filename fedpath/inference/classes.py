"""A site's class names matched to a model's: any case, or by ``--class-map``.

A site names its folders as it likes: class folders (and manifest or slide
labels) match the model's classes case-insensitively (``Normal/`` is ``normal``),
and ``--class-map FOLDER=CLASS,...`` maps other names (``Mitosis=atypical``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fedpath.config import ConfigError
from fedpath.data.base import DataError
from fedpath.data.manifest import Records

MAP_SYNTAX = "FOLDER=CLASS[,FOLDER=CLASS...] (e.g. Mitosis=atypical,Normal=normal)"


def parse_class_map(text: str | None, classes: Sequence[str]) -> dict[str, str]:
    """``--class-map`` (:data:`MAP_SYNTAX`) -> {folder or label: model class}.

    A class may be named in any case (it becomes the model's spelling); several
    folders may map to one class. Errors name the option and the bad entry."""
    if text is None:
        return {}
    out: dict[str, str] = {}
    by_fold = {c.casefold(): c for c in classes}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        key, sep, value = (s.strip() for s in entry.partition("="))
        if not sep or not key or not value:
            raise ConfigError(
                f"--class-map: entry {entry!r} is not FOLDER=CLASS; expected "
                f"{MAP_SYNTAX}"
            )
        if key in out:
            raise ConfigError(f"--class-map: {key!r} is mapped twice")
        cls = value if value in classes else by_fold.get(value.casefold())
        if cls is None:
            raise ConfigError(
                f"--class-map: {entry!r} maps to {value!r}, which is not a class of "
                f"the model; its classes: {', '.join(classes)}"
            )
        out[key] = cls
    if not out:
        raise ConfigError(f"--class-map: no FOLDER=CLASS entry; expected {MAP_SYNTAX}")
    return out


def match_class(
    name: str, classes: Sequence[str], class_map: Mapping[str, str]
) -> str | None:
    """The model class ``name`` stands for: by ``class_map`` (its key in any
    case), else the class of the same name, else of the same name in another case;
    None: none."""
    if name in class_map:
        return class_map[name]
    folded = name.casefold()
    mapped = [v for k, v in class_map.items() if k.casefold() == folded]
    if mapped:
        return mapped[0]
    if name in classes:
        return name
    same = [c for c in classes if c.casefold() == folded]
    return same[0] if len(same) == 1 else None


def resolve_classes(
    names: Sequence[str],
    classes: Sequence[str],
    class_map: Mapping[str, str],
    where: str,
    what: str = "class folders",
) -> dict[str, str]:
    """{name: model class} for every one of ``names`` (folders, labels or a
    dataset's classes) by :func:`match_class`; a name that matches no class, or a
    ``class_map`` entry that names none of ``names``, is an error that lists the
    names seen and the classes expected."""
    out: dict[str, str] = {}
    unknown: list[str] = []
    for name in names:
        cls = match_class(name, classes, class_map)
        if cls is None:
            unknown.append(name)
        else:
            out[name] = cls
    seen = ", ".join(sorted(names)) or "none"
    folded = {n.casefold() for n in names}
    unused = [k for k in class_map if k.casefold() not in folded]
    if unused:
        raise ConfigError(
            f"--class-map: {unused} name(s) none of the {what} of {where}; {what} "
            f"seen: {seen}"
        )
    if unknown:
        raise DataError(
            f"{where}: {what} {unknown} are not classes of the model {list(classes)} "
            f"(compared case-insensitively); {what} seen: {seen}; rename them or "
            f"map them to the model's classes with --class-map {unknown[0]}=CLASS"
            f"{',...' if len(unknown) > 1 else ''} ({MAP_SYNTAX})"
        )
    return out


def renamed(mapping: Mapping[str, str]) -> dict[str, str]:
    """The entries of ``mapping`` whose name changed (for the report)."""
    return {k: v for k, v in mapping.items() if k != v}


def rename_records(
    rec: Records,
    classes: Sequence[str],
    class_map: Mapping[str, str],
    where: str,
    what: str,
) -> dict[str, str]:
    """Relabel ``rec`` with the model's class names (:func:`resolve_classes`);
    return the names that changed."""
    mapping = resolve_classes(sorted(set(rec.labels)), classes, class_map, where, what)
    rec.labels = [mapping[label] for label in rec.labels]
    return renamed(mapping)
