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
from typing import TYPE_CHECKING, Any, Literal

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


def read_traffic(
    run_dir: Path, torn_tail: Literal["skip", "refuse"] = "refuse"
) -> list[dict[str, Any]]:
    """Every record of the run's ``traffic.jsonl``, each checked
    (:func:`check_record`). The audit vouches for what it read, so a record it
    cannot read, a truncated last line included (a run still writing, or
    killed mid-write), is an error naming the file and the line, never a
    record skipped under a clean verdict; the report's curves of a live run
    (``torn_tail="skip"``) leave a truncated last line out."""
    path = run_dir / "traffic.jsonl"  # persistence.TRAFFIC (which imports torch)
    if not path.exists():
        raise DataError(
            f"{run_dir}: no traffic.jsonl (not a run directory, or a run made "
            "before fedpath recorded its traffic)"
        )
    from fedpath.runtime.records import read_json_lines

    lines = read_json_lines(path, "traffic record", torn_tail=torn_tail)
    where = f"traffic record {str(path)!r}"
    for line, record in zip(lines.numbers, lines.records, strict=True):
        check_record(record, f"{where}: line {line}")
    return lines.records


def check_record(record: dict[str, Any], where: str) -> None:
    """A ``traffic.jsonl`` record as :class:`~fedpath.runtime.traffic.TrafficAudit`
    writes it: ``round`` (an integer), ``stage`` and ``client`` (strings),
    ``received`` (a list of arrays) and ``sent`` (a list of arrays, or null: no
    reply), each array ``[group, name, dtype, shape, bytes]``."""
    for key, ok, expected in (
        ("round", _is_int, "an integer"),
        ("stage", _is_str, "a string"),
        ("client", _is_str, "a string"),
        ("received", _is_arrays, ARRAYS),
    ):
        if not ok(record.get(key)):
            raise DataError(f"{where}: {key!r} must be {expected}")
    if record.get("sent") is not None and not _is_arrays(record["sent"]):
        raise DataError(f"{where}: 'sent' must be {ARRAYS}, or null (no reply)")


#: how a list of arrays of a traffic record is worded in errors
ARRAYS = "a list of [group, name, dtype, shape, bytes] arrays"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_arrays(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(a, list)
        and len(a) == 5
        and all(_is_str(x) for x in a[:3])
        and isinstance(a[3], list)
        and all(_is_int(n) and n >= 0 for n in a[3])
        and _is_int(a[4])
        and a[4] >= 0
        for a in v
    )


def image_size_of(run_dir: Path) -> int | None:
    """The run's image size (``data.params.image_size`` of its ``config.yaml``),
    for the check that nothing image-shaped left a client; None: not recorded.
    A config that cannot be read is an error (the audit could not check)."""
    from fedpath.utils.yaml_io import read_yaml_mapping

    cfg = run_dir / "config.yaml"
    if not cfg.exists():
        return None
    raw = read_yaml_mapping(cfg, "run config")
    data = raw.get("data")
    params = data.get("params") if isinstance(data, dict) else None
    size = params.get("image_size") if isinstance(params, dict) else None
    return size if isinstance(size, int) and _is_int(size) and size > 0 else None


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
