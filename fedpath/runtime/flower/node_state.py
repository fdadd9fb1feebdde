"""A node's client state on the hospital's own disk, for exact resume over Flower.

Under Flower a client's :class:`~fedpath.types.ClientState` (FedBN's local
normalization layers, FedAD's local head, a FedHD client's own MIL model) lives in
the node's ``context.state``, which lasts one Flower run. Resuming from the
coordinator's checkpoint starts a new Flower run, so without more the state would
restart from the global model. With node config ``state-dir`` (``fedpath flower
supernode --state-dir DIR``) the node also writes the state after every stage to

    DIR/<experiment>/<method>/<target>/seed<seed>/<client>/round<r>.pt

(the last two rounds are kept: the coordinator resumes after its last checkpointed
round, which is the node's last round or the one before) and, when a stage of round
``r > 1`` arrives with no state in memory (a new Flower run), loads the file of
round ``r - 1``. The state never leaves the hospital; the files hold tensors only
(``torch.load(weights_only=True)``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from fedpath.config import ExperimentConfig
from fedpath.types import ClientState
from fedpath.utils.io import atomic_torch_save

log = logging.getLogger("fedpath")


def state_file(
    root: Path, cfg: ExperimentConfig, client: str, target: str, seed: int, rnd: int
) -> Path:
    """Where the node keeps ``client``'s state after round ``rnd``."""
    run = root / cfg.name / cfg.method / target.replace("/", "_") / f"seed{seed}"
    return run / client.replace("/", "_") / f"round{rnd}.pt"


def save_state(
    root: Path,
    cfg: ExperimentConfig,
    client: str,
    target: str,
    seed: int,
    rnd: int,
    state: ClientState,
) -> None:
    """Write the state after round ``rnd``; drop rounds before ``rnd - 1``."""
    path = state_file(root, cfg, client, target, seed, rnd)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    arrays = {
        group: {name: torch.from_numpy(np.array(v, copy=True)) for name, v in a.items()}
        for group, a in state.arrays.items()
    }
    atomic_torch_save({"arrays": arrays, "scalars": dict(state.scalars)}, path)
    for old in path.parent.glob("round*.pt"):
        stem = old.stem[len("round") :]
        if stem.isdigit() and int(stem) < rnd - 1:
            old.unlink(missing_ok=True)


def load_state(
    root: Path, cfg: ExperimentConfig, client: str, target: str, seed: int, rnd: int
) -> ClientState | None:
    """The state the node wrote for ``client`` after round ``rnd``, if it has it."""
    path = state_file(root, cfg, client, target, seed, rnd)
    if not path.is_file():
        return None
    saved = torch.load(path, weights_only=True)
    arrays = {
        group: {name: t.numpy() for name, t in a.items()}
        for group, a in saved["arrays"].items()
    }
    log.info("restored the client state of round %d from %s", rnd, path)
    return ClientState(arrays, dict(saved["scalars"]))
