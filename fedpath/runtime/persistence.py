"""What a run leaves on disk: its checkpoint, its result records, its final model.

A run directory holds ``results.jsonl`` (one JSON record per line, appended as the
run goes), ``checkpoint.pt`` (rewritten atomically after every round: the server
state, every client's :class:`~fedpath.types.ClientState`, the last evaluation and,
with ``partition.validation``, the selected round's weights),
``final.json`` and, for image classifiers, ``model.fpm``. Resuming loads the
checkpoint and drops the records of rounds after it (the round that crashed), so a
resumed run writes exactly the records of an uninterrupted one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedpath.types import ClientState, Payload, payload_from_tree, payload_to_tree
from fedpath.utils.io import atomic_torch_save, atomic_write_text, read_jsonl

CHECKPOINT = "checkpoint.pt"
RESULTS = "results.jsonl"
FINAL = "final.json"
MODEL = "model.fpm"


class ResumeError(RuntimeError):
    """A checkpoint that cannot be resumed (unreadable, or from another config)."""


@dataclass
class Checkpoint:
    """The state of a run after round ``round``.

    ``selected``: the best validation round so far (its global weights, ``round``
    and ``value``; :mod:`fedpath.runtime.selection`), None without validation.
    """

    round: int
    server: Payload
    clients: dict[str, ClientState]
    last_eval: dict[str, Any]
    selected: Payload | None = None


def save_checkpoint(
    run_dir: Path,
    ckpt: Checkpoint,
    config_hash: str,
    fold: str,
    seed: int,
) -> None:
    """Write ``checkpoint.pt`` atomically (tensors and plain values only)."""
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
    atomic_torch_save(tree, run_dir / CHECKPOINT)


def load_checkpoint(run_dir: Path, config_hash: str) -> Checkpoint | None:
    """The run's checkpoint, with later records dropped; None (and no records) if
    there is none. :class:`ResumeError` if it is unreadable or from another config."""
    path = run_dir / CHECKPOINT
    if not path.is_file():
        (run_dir / RESULTS).unlink(missing_ok=True)
        return None
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise ResumeError(f"cannot read checkpoint {path}: {err}") from None
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
    )
    truncate_results(run_dir / RESULTS, ckpt.round)
    return ckpt


def truncate_results(path: Path, last_round: int) -> None:
    """Drop records of rounds after ``last_round`` (the round that crashed)."""
    if not path.is_file():
        return
    keep = [r for r in read_jsonl(path) if int(r.get("round", 0)) <= last_round]
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in keep))


def save_final(run_dir: Path, record: Mapping[str, Any]) -> None:
    """Write ``final.json`` (the run is finished once it exists)."""
    atomic_write_text(run_dir / FINAL, json.dumps(record, indent=2, default=str))
