"""What a run leaves on disk: its checkpoint, its result records, its final model.

A run directory holds ``results.jsonl`` (one JSON record per line, appended as the
run goes), ``checkpoint.pt`` (rewritten atomically after every round: the server
state, every client's :class:`~fedpath.types.ClientState`, the last evaluation and,
with ``partition.validation``, the selected round's weights; with
``evaluation.swa_from``, the running mean of the global weights),
``final.json`` and, for image classifiers, ``model.fpm``. Resuming loads the
checkpoint and drops the records of rounds after it (the round that crashed), so a
resumed run writes exactly the records of an uninterrupted one.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fedpath.errors import ConfigError, DataError, ResumeError, RunError
from fedpath.runtime.records import read_final
from fedpath.runtime.same_config import check_same_config, only_added_at_default
from fedpath.types import ClientState, Payload, payload_from_tree, payload_to_tree
from fedpath.utils.io import (
    atomic_write_bytes,
    atomic_write_text,
    dumps_json,
    make_folder,
    read_json_lines,
)

log = logging.getLogger("fedpath")

if TYPE_CHECKING:
    from fedpath.config import ExperimentConfig

CHECKPOINT = "checkpoint.pt"
RESULTS = "results.jsonl"
FINAL = "final.json"
#: what each client received and sent, per round and stage (``fedpath audit``)
TRAFFIC = "traffic.jsonl"
MODEL = "model.fpm"
#: the folder of the clients' own models (``evaluation.protocol: local``)
CLIENT_MODELS = "models"


@dataclass
class Checkpoint:
    """The state of a run after round ``round``.

    ``selected``: the best validation round so far (its global weights, ``round``
    and ``value``; :mod:`fedpath.runtime.selection`), None without validation.
    ``averaged``: the running mean of the global weights
    (:mod:`fedpath.runtime.averaging`), None without ``evaluation.swa_from``.
    """

    round: int
    server: Payload
    clients: dict[str, ClientState]
    last_eval: dict[str, Any]
    selected: Payload | None = None
    averaged: Payload | None = None


def save_checkpoint(
    run_dir: Path,
    ckpt: Checkpoint,
    config_hash: str,
    fold: str,
    seed: int,
) -> None:
    """Write ``checkpoint.pt`` atomically (tensors and plain values only)."""
    write_checkpoint(run_dir, checkpoint_bytes(ckpt, config_hash, fold, seed))


def write_checkpoint(run_dir: Path, blob: bytes) -> None:
    """Write serialized checkpoint bytes atomically (temp file, fsync, rename)."""
    atomic_write_bytes(run_dir / CHECKPOINT, blob)


#: the errors of a write that found no room: a full disk, a spent quota
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


@contextmanager
def disk_full(path: Path, last_round: int) -> Iterator[None]:
    """Turn a full disk while writing ``path`` into a :class:`RunError` naming
    the file, the errno and how to continue; ``last_round``: the last round
    whose checkpoint is complete (writes are atomic, so it is intact)."""
    try:
        yield
    except OSError as err:
        if err.errno not in DISK_FULL:
            raise
        kept = (
            f"the checkpoint of round {last_round}, the last complete round, is kept"
            if last_round > 0
            else "no round had completed"
        )
        code = errno.errorcode[err.errno]
        raise RunError(
            f"cannot write {path}: {os.strerror(err.errno).lower()} "
            f"({code}); {kept}; free some space, then continue with `fedpath run "
            "CONFIG --resume`"
        ) from None


def checkpoint_bytes(ckpt: Checkpoint, config_hash: str, fold: str, seed: int) -> bytes:
    """The checkpoint serialized with its digest (see :func:`write_checkpoint`)."""
    tree: dict[str, Any] = {
        "format": 1,
        "round": ckpt.round,
        "config_hash": config_hash,
        "fold": fold,
        "seed": seed,
        "server": payload_to_tree(ckpt.server),
        "clients": {c: payload_to_tree(s) for c, s in ckpt.clients.items()},
        "last_eval": json.dumps(ckpt.last_eval),
    }
    if ckpt.selected is not None:  # absent without validation: the old layout
        tree["selected"] = payload_to_tree(ckpt.selected)
    if ckpt.averaged is not None:
        tree["averaged"] = payload_to_tree(ckpt.averaged)
    tree["digest"] = tree_digest(tree)
    buf = io.BytesIO()
    torch.save(tree, buf)
    return buf.getvalue()


def tree_digest(tree: Mapping[str, Any]) -> str:
    """SHA-256 over every value of a checkpoint tree (tensor bytes, dtypes and
    shapes included), in sorted key order; the ``digest`` entry itself excluded.

    torch's zip container checks no checksum of the tensor data, so a flipped
    byte would load as a wrong weight; this digest is verified before a resume.
    """
    h = hashlib.sha256()

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, Mapping):
            for key in sorted(node, key=str):
                if prefix or key != "digest":
                    walk(f"{prefix}/{key}", node[key])
            return
        h.update(prefix.encode() + b"\0")
        if isinstance(node, torch.Tensor):
            t = node.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            if t.numel():  # (an empty tensor may carry a zero stride)
                h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            h.update(repr(node).encode())

    walk("", tree)
    return h.hexdigest()


def load_checkpoint(
    run_dir: Path, config_hash: str, cfg: ExperimentConfig | None = None
) -> Checkpoint | None:
    """The run's checkpoint, with later records dropped; None (and no records) if
    there is none. :class:`ResumeError` if it is unreadable or from another config
    (with ``cfg``, options added since at their defaults do not count, as in
    :func:`check_same_config`)."""
    path = run_dir / CHECKPOINT
    if not path.is_file():
        (run_dir / RESULTS).unlink(missing_ok=True)
        (run_dir / TRAFFIC).unlink(missing_ok=True)
        return None
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as err:
        raise ResumeError(
            f"cannot read checkpoint {path}: {(err.strerror or str(err)).lower()}"
        ) from None
    except Exception as err:
        # torch's own text is several lines advising an unsafe load: one line
        raise ResumeError(
            f"cannot read checkpoint {path}: not a fedpath checkpoint, or damaged "
            f"({type(err).__name__}); {_START_OVER}"
        ) from None
    if not isinstance(raw, dict) or "digest" not in raw:
        raise ResumeError(
            f"checkpoint {path} has no digest (written by an older fedpath, or not "
            "a fedpath checkpoint); start the run afresh"
        )
    if raw["digest"] != tree_digest(raw):
        raise ResumeError(
            f"checkpoint {path} is corrupted (its digest does not match its "
            "contents); delete it to start the run afresh"
        )
    if raw.get("config_hash") != config_hash and not (
        cfg is not None and only_added_at_default(run_dir, cfg)
    ):
        raise ResumeError(
            f"{path} was written by a different config (hash "
            f"{raw.get('config_hash')} != {config_hash}); resume with the "
            "same config, or choose another output_dir/name"
        )
    ckpt = checkpoint_from_tree(raw, path)
    truncate_results(run_dir / RESULTS, ckpt.round)
    if (run_dir / TRAFFIC).is_file():
        truncate_results(run_dir / TRAFFIC, ckpt.round)
    return ckpt


#: how to go on from run records that --resume cannot use
_REDO = "run without --resume to redo the run, or resume from a copy of the run"
#: how to go on from a checkpoint that cannot be used
_START_OVER = (
    "delete it to start the run afresh, or resume from a copy of the run directory"
)


def checkpoint_from_tree(raw: Mapping[str, Any], path: Path) -> Checkpoint:
    """The :class:`Checkpoint` of a loaded tree whose digest matched, its
    structure checked: the digest proves the file is as written, not that a
    fedpath wrote it (a crafted file can carry a self-consistent digest), so a
    missing or mistyped field is a :class:`ResumeError` naming it."""

    def bad(key: str, expected: str) -> ResumeError:
        return ResumeError(
            f"checkpoint {path}: {key!r} must be {expected}; not a fedpath "
            f"checkpoint, or damaged; {_START_OVER}"
        )

    def payload(tree: Any, key: str, cls: type[Payload] = Payload) -> Payload:
        expected = "a payload (tensors under 'arrays', values under 'scalars')"
        if not isinstance(tree, Mapping):
            raise bad(key, expected)
        arrays, scalars = tree.get("arrays", {}), tree.get("scalars", {})
        if not isinstance(scalars, Mapping) or not isinstance(arrays, Mapping):
            raise bad(key, expected)
        for group in arrays.values():
            if not isinstance(group, Mapping) or not all(
                isinstance(t, torch.Tensor) for t in group.values()
            ):
                raise bad(key, expected)
        try:
            return payload_from_tree(tree, cls)
        except (TypeError, RuntimeError):  # a dtype numpy has not (bfloat16)
            raise bad(key, "a payload of numeric tensors") from None

    rnd, clients = raw.get("round"), raw.get("clients")
    if not isinstance(rnd, int) or isinstance(rnd, bool) or rnd < 0:
        raise bad("round", "a round number (an integer >= 0)")
    if not isinstance(clients, Mapping):
        raise bad("clients", "a mapping of client names to their states")
    try:
        last_eval = json.loads(raw.get("last_eval", "{}"))
    except (TypeError, ValueError, RecursionError):
        last_eval = None
    if not isinstance(last_eval, dict):
        raise bad("last_eval", "a JSON object")
    optional = {k: payload(raw[k], k) for k in ("selected", "averaged") if k in raw}
    return Checkpoint(
        round=rnd,
        server=payload(raw.get("server"), "server"),
        clients={
            str(c): payload(t, f"clients.{c}", ClientState)  # type: ignore[misc]
            for c, t in clients.items()
        },
        last_eval=last_eval,
        selected=optional.get("selected"),
        averaged=optional.get("averaged"),
    )


def open_run_dir(run_dir: Path, fresh: bool) -> None:
    """Create ``run_dir`` and drop what a killed write left (``.*.tmp``); for a
    ``fresh`` run also every output of an earlier run, so none stays beside the
    new one."""
    make_folder(run_dir, "run directory")
    for name in (RESULTS, CHECKPOINT, FINAL, MODEL, TRAFFIC, "config.yaml"):
        if (run_dir / name).is_dir():  # would fail mid-run, after training
            raise ConfigError(
                f"run directory {run_dir}: {name} is a folder; expected the run's "
                "file there (move the folder away)"
            )
    for stale in run_dir.glob(".*.tmp"):
        stale.unlink(missing_ok=True)
    if not fresh:
        return
    for name in (RESULTS, CHECKPOINT, FINAL, MODEL, TRAFFIC):
        (run_dir / name).unlink(missing_ok=True)
    for stale in (run_dir / CLIENT_MODELS).glob("*.fpm"):
        stale.unlink()


def finished_record(
    run_dir: Path, cfg: ExperimentConfig, config_hash: str
) -> dict[str, Any] | None:
    """The final record of a run that finished (None: it did not), checked to
    come from the same config (:func:`check_same_config`)."""
    done = run_dir / FINAL
    if not done.is_file():
        return None
    try:
        record = read_final(run_dir)
    except DataError as err:
        raise ResumeError(
            f"{err}; --resume cannot tell whether the run finished: delete "
            f"{done} to redo the run"
        ) from None
    check_same_config(run_dir, record, cfg, config_hash)
    return record


def truncate_results(path: Path, last_round: int) -> None:
    """Drop records of rounds after ``last_round`` (the round that crashed)."""
    if not path.is_file():
        return
    try:
        records = read_json_lines(path, "run record").records
    except DataError as err:
        raise ResumeError(f"{err}; {_REDO}") from None
    keep: list[dict[str, Any]] = []
    for i, rec in enumerate(records):
        rnd = rec.get("round", 0)
        if not isinstance(rnd, int) or isinstance(rnd, bool):
            raise ResumeError(
                f"run record {str(path)!r}: record {i + 1} has a 'round' that is "
                f"not an integer; the record is damaged; {_REDO}"
            )
        if rnd <= last_round:
            keep.append(rec)
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in keep))


def save_final(run_dir: Path, record: Mapping[str, Any]) -> None:
    """Write ``final.json`` (the run is finished once it exists)."""
    atomic_write_text(run_dir / FINAL, dumps_json(record, indent=2))
