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

import hashlib
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fedpath.errors import ResumeError
from fedpath.types import ClientState, Payload, payload_from_tree, payload_to_tree
from fedpath.utils.io import (
    atomic_write_bytes,
    atomic_write_text,
    dumps_json,
    read_jsonl,
)

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


def load_checkpoint(run_dir: Path, config_hash: str) -> Checkpoint | None:
    """The run's checkpoint, with later records dropped; None (and no records) if
    there is none. :class:`ResumeError` if it is unreadable or from another config."""
    path = run_dir / CHECKPOINT
    if not path.is_file():
        (run_dir / RESULTS).unlink(missing_ok=True)
        (run_dir / TRAFFIC).unlink(missing_ok=True)
        return None
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise ResumeError(f"cannot read checkpoint {path}: {err}") from None
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
    if raw.get("config_hash") != config_hash:
        raise ResumeError(
            f"{path} was written by a different config (hash "
            f"{raw.get('config_hash')} != {config_hash}); resume with the "
            "same config, or choose another output_dir/name"
        )
    ckpt = Checkpoint(
        round=int(raw["round"]),
        server=payload_from_tree(raw["server"]),
        clients={
            c: payload_from_tree(t, ClientState)  # type: ignore[misc]
            for c, t in raw["clients"].items()
        },
        last_eval=json.loads(raw.get("last_eval", "{}")),
        selected=payload_from_tree(raw["selected"]) if "selected" in raw else None,
        averaged=payload_from_tree(raw["averaged"]) if "averaged" in raw else None,
    )
    truncate_results(run_dir / RESULTS, ckpt.round)
    if (run_dir / TRAFFIC).is_file():
        truncate_results(run_dir / TRAFFIC, ckpt.round)
    return ckpt


def open_run_dir(run_dir: Path, fresh: bool) -> None:
    """Create ``run_dir`` and drop what a killed write left (``.*.tmp``); for a
    ``fresh`` run also every output of an earlier run, so none stays beside the
    new one."""
    run_dir.mkdir(parents=True, exist_ok=True)
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
    record = dict(json.loads(done.read_text()))
    check_same_config(run_dir, record, cfg, config_hash)
    return record


def check_same_config(
    run_dir: Path, final: Mapping[str, Any], cfg: ExperimentConfig, config_hash: str
) -> None:
    """Refuse to hand back a finished run's results for a changed config
    (``config_hash``: the hash of ``cfg``).

    ``--resume`` skips finished runs; if the config changed since, their results
    would be returned as the new config's. The differing keys are named (from the
    run's ``config.yaml``).
    """
    if final.get("config_hash") == config_hash:
        return
    keys: list[str] = []
    saved = run_dir / "config.yaml"
    if saved.is_file():
        import yaml

        old = _flat(yaml.safe_load(saved.read_text()) or {})
        new = _flat(cfg.to_dict())
        keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        from fedpath.config import RUN_LOCAL_KEYS

        keys = [k for k in keys if k not in RUN_LOCAL_KEYS]
    shown = ", ".join(keys[:8]) + (" ..." if len(keys) > 8 else "")
    raise ResumeError(
        f"{run_dir} finished with another config (differing keys: "
        f"{shown or 'unknown'}); --resume would return its old results: run "
        "without --resume to redo it, or choose another name/output_dir"
    )


def _flat(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def truncate_results(path: Path, last_round: int) -> None:
    """Drop records of rounds after ``last_round`` (the round that crashed)."""
    if not path.is_file():
        return
    keep = [r for r in read_jsonl(path) if int(r.get("round", 0)) <= last_round]
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in keep))


def save_final(run_dir: Path, record: Mapping[str, Any]) -> None:
    """Write ``final.json`` (the run is finished once it exists)."""
    atomic_write_text(run_dir / FINAL, dumps_json(record, indent=2))
