"""``fedpath info``: what a model file says about itself, without scoring it.

A hospital receiving ``model.fpm`` checks it before use: its SHA-256 against
the one its maker sent, the classes and the operating point, the sites it was
trained on, its validation figures and the leave-one-hospital-out estimate
(docs/ship.md, "What to send with the file"). ``info`` verifies the file the
way every loader does (magic, format, the whole-file SHA-256, tensors only, the
header's fields for its kind) and prints the header; ``--json`` prints all of
it for a script.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from fedpath.commands.common import console
from fedpath.commands.evaluate import expected_estimate, expected_point
from fedpath.utils.cli_args import SubParsers

#: header fields printed first, in this order (the rest follow alphabetically)
ORDER = (
    "method",
    "backbone",
    "architecture",
    "embedding_space",
    "class_names",
    "image_size",
    "zoom",
    "mean",
    "std",
    "tta",
    "temperature",
    "threshold",
    "target_sensitivity",
    "trained_on",
    "federation",
    "client",
    "domain",
    "held_out",
    "seed",
    "round",
    "selection",
    "validation",
    "expected",
    "adapted_bn",
    "members",
    "config_hash",
)
#: in the first lines, or the container's own bookkeeping
SKIP = {
    *("file", "sha256", "bytes", "tensors", "parameters"),
    *("kind", "format", "fedpath_version", "created"),
    *("payload_bytes", "payload_sha256"),
}


def register(sub: SubParsers) -> None:
    """Add ``info`` to ``sub``."""
    p = sub.add_parser(
        "info",
        help="verify a model file and print what it says about itself",
        description="Verifies a fedpath model file (its SHA-256 over header and "
        "weights, tensors only, the header's fields) and prints its header: the "
        "file's SHA-256 to compare with the one its maker sent, classes, input, "
        "temperature and operating point, the sites it was trained on, its "
        "validation figures and the leave-one-hospital-out estimate. Nothing is "
        "scored.",
    )
    p.add_argument("model", type=Path, help="a model file (.fpm) of any kind")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the whole header, the file's SHA-256, size and parameter count "
        "as one JSON object",
    )


def describe(path: Path) -> dict[str, Any]:
    """The verified header of the model file ``path`` with ``file``, ``sha256``
    (of the whole file, as ``sha256sum`` prints it), ``bytes``, ``tensors`` and
    ``parameters``. Raises :class:`~fedpath.errors.ArtifactError` naming the
    file when it is not a sound model file."""
    from fedpath.loading import from_container
    from fedpath.model_file import read_container
    from fedpath.models.pretrained import sha256_file

    header, weights = read_container(path)
    from_container(header, weights, path)  # the kind's own checks of the fields
    return {
        "file": str(path),
        "sha256": sha256_file(path),
        "bytes": path.stat().st_size,
        "tensors": len(weights),
        "parameters": int(sum(w.numel() for w in weights.values())),
        **header,
    }


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list) and all(not isinstance(x, dict | list) for x in v):
        return ", ".join(_value(x) for x in v)
    return json.dumps(v) if isinstance(v, dict | list) else str(v)


def _lines(key: str, value: Any) -> Iterator[tuple[str, str]]:
    """(dotted key, printed value) of ``value``, nested mappings flattened."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _lines(f"{key}.{k}", v)
    elif isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        for i, item in enumerate(value, start=1):  # an ensemble's members
            yield from _lines(f"{key}.{i}", item)
    elif value not in ("", None, [], {}):
        yield key, _value(value)


def render(info: Mapping[str, Any]) -> list[str]:
    """The text ``info`` prints for :func:`describe`'s result."""
    kind = info.get("kind") or "image"
    out = [
        f"{info['file']}: fedpath model file, kind {kind}, format "
        f"{info.get('format')}, written by fedpath {info.get('fedpath_version')} "
        f"on {info.get('created', '?')}",
        f"sha256 {info['sha256']} (compare with the one its maker sent)",
        f"size {info['bytes']:,} bytes, {info['tensors']} tensors, "
        f"{info['parameters']:,} parameters",
    ]
    if info.get("temperature") is None and kind != "ensemble":
        out.append("no temperature fitted (no validation slides): probabilities raw")
    exp = info.get("expected")
    if isinstance(exp, Mapping) and exp:
        out.append(expected_estimate(exp))
        if point := expected_point(exp):
            out.append(point)
    rest = [k for k in ORDER if k in info]
    rest += sorted(k for k in info if k not in ORDER and k not in SKIP)
    rows = [row for k in rest for row in _lines(k, info[k])]
    width = max((len(k) for k, _ in rows), default=0)
    out += [f"  {k:<{width}}  {v}" for k, v in rows]
    return out


def run(args: argparse.Namespace) -> int:
    """Print the verified header of ``args.model``."""
    info = describe(args.model)
    out = console(False)  # the command's answer: printed even when quiet
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
        return 0
    for line in render(info):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    return 0
