"""``fedpath audit RUN_DIR``: everything each client received and sent, per round.

Every run writes ``traffic.jsonl`` while it runs (in-process and on the Flower
coordinator): one line per (round, stage, client) with the ``[group, name, dtype,
shape, bytes]`` of every array the client received and every array it sent,
never the values (:func:`manifest` makes those records). During the run each
reply is also checked (the node guard's :func:`fedpath.runtime.guard.check_reply`):
an image-shaped array from a client stops the run unless the algorithm declares
it uploads raw data (a pooled, non-private baseline). This module turns the file
into a table and a verdict, from the records alone (no PyTorch, no data).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from fedpath.errors import DataError
from fedpath.runtime.guard import image_shaped

if TYPE_CHECKING:
    from fedpath.types import Payload

#: array groups that hold raw data when a client sends them
RAW_GROUPS = {"pool": "images (pooled upper bound)", "real_slides": "real embeddings"}


@dataclass
class Flow:
    """One direction of one (round, stage, client): arrays per group."""

    arrays: dict[str, list[list[Any]]] = field(default_factory=dict)

    def add(self, entries: Iterable[list[Any]]) -> None:
        for group, name, dtype, shape, nbytes in entries:
            self.arrays.setdefault(group, []).append([name, dtype, shape, nbytes])

    def summary(self, detail: bool) -> list[str]:
        out: list[str] = []
        for group, rows in sorted(self.arrays.items()):
            total = sum(r[3] for r in rows)
            if detail:
                out.extend(f"{group}/{n} {d} {tuple(s)} {b:,} B" for n, d, s, b in rows)
            else:
                shapes = {tuple(r[2]) for r in rows}
                shown = ", ".join(str(s) for s in sorted(shapes)[:2])
                more = f" +{len(shapes) - 2} shapes" if len(shapes) > 2 else ""
                out.append(f"{group}: {len(rows)} arrays, {total:,} B ({shown}{more})")
        return out or ["nothing"]

    def bytes(self) -> int:
        return sum(r[3] for rows in self.arrays.values() for r in rows)


def manifest(payload: Payload) -> list[list[Any]]:
    """``[group, name, dtype, shape, bytes]`` of every array of ``payload`` (what
    ``traffic.jsonl`` records; the values themselves are never written)."""
    return [
        [g, k, str(a.dtype), [int(x) for x in a.shape], int(a.nbytes)]
        for g, arrays in payload.arrays.items()
        for k, a in arrays.items()
    ]


def read_traffic(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "traffic.jsonl"
    if not path.is_file():
        raise DataError(
            f"{run_dir}: no traffic.jsonl (not a run directory, or a run made "
            "before fedpath recorded its traffic)"
        )
    from fedpath.utils.io import read_jsonl

    return list(read_jsonl(path))


def image_size_of(run_dir: Path) -> int | None:
    cfg = run_dir / "config.yaml"
    if not cfg.is_file():
        return None
    raw = yaml.safe_load(cfg.read_text()) or {}
    size = ((raw.get("data") or {}).get("params") or {}).get("image_size")
    return int(size) if isinstance(size, int) else None


def verdict(records: list[dict[str, Any]], image_size: int | None) -> list[str]:
    """What left the clients that is not weights, statistics or synthetic data."""
    findings = []
    for r in records:
        for group, name, _, shape, _ in r.get("sent") or []:
            where = f"round {r['round']} {r['stage']} client {r['client']}"
            if group in RAW_GROUPS:
                what = RAW_GROUPS[group]
                findings.append(f"{where}: {group}/{name} carries {what}")
            elif image_size and image_shaped(tuple(shape), image_size):
                shown = tuple(shape)
                findings.append(f"{where}: {group}/{name} {shown} is image-shaped")
    return findings


def audit(run_dir: Path, detail: bool = False) -> tuple[list[list[str]], list[str]]:
    """Table rows ``[round, stage, client, received, sent]`` and the findings."""
    records = read_traffic(run_dir)
    flows: dict[tuple[int, str, str], tuple[Flow, Flow]] = defaultdict(
        lambda: (Flow(), Flow())
    )
    failed: set[tuple[int, str, str]] = set()
    for r in records:
        key = (int(r["round"]), str(r["stage"]), str(r["client"]))
        down, up = flows[key]
        down.add(r.get("received") or [])
        if r.get("sent") is None:
            failed.add(key)
        else:
            up.add(r["sent"])
    rows = []
    for key in sorted(flows):
        down, up = flows[key]
        sent = ["no reply"] if key in failed else up.summary(detail)
        received = "\n".join(down.summary(detail))
        rows.append([str(key[0]), key[1], key[2], received, "\n".join(sent)])
    return rows, verdict(records, image_size_of(run_dir))
