"""FedDG-ELCFS (Liu et al., CVPR 2021), adapted to self-supervised classification.

ELCFS shares amplitude spectra between clients and trains on local images whose
low-frequency amplitude is continuously interpolated with other clients'
(:mod:`fedpath.ssl.amplitude`), plus an episodic meta-learning step and a
boundary-oriented contrastive loss for segmentation. The FedAD paper uses it as a
classification baseline ("FedDG adapted"). The adaptation here:

* ``amplitude`` stage (round 1, and again whenever the bank is empty): each
  client uploads the low-band amplitudes of ``images_per_client`` of its images
  (a 3 x s x s array each, s = 2 * floor(beta * size / 2) + 1; no phase, so no
  image can be rebuilt from it); the server keeps them and, every round, sends
  each client the bank *without its own entries*;
* local training: SimCLR where view b is T(amplitude_mix(x)) (the cross-client
  frequency-space interpolation as an augmentation) and view a is T(x);
  NT-Xent; encoder + projection head aggregated (FedAvg);
* left out: the episodic meta-learning inner/outer step and the boundary loss,
  both specific to supervised segmentation.

A client whose bank is empty (one-client federation) mixes with its own
amplitudes, which never leave it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from fedpath.algorithms.base import (
    ProtocolError,
    ServerContext,
    register_algorithm,
    round_only,
)
from fedpath.algorithms.fedavg_ssl import SimCLRClient, SimCLRServer
from fedpath.algorithms.names import AMPLITUDE, AMPLITUDE_BANK, FIT
from fedpath.algorithms.ssl_common import SSLNet
from fedpath.params.algorithms import ELCFSParams
from fedpath.ssl.amplitude import amplitude_mix, low_band_amplitude
from fedpath.types import ClientState, Payload, Scalar
from fedpath.wire import Wire

log = logging.getLogger("fedpath")


class ELCFSClient(SimCLRClient):
    """SimCLR with cross-client amplitude interpolation as one view's augmentation."""

    params: ELCFSParams

    def own_amplitudes(self, tag: str) -> np.ndarray:
        n = len(self.ctx.data)
        k = min(n, self.params.images_per_client)
        rng = np.random.default_rng(self.ctx.seed_for(tag))
        pos = np.sort(rng.choice(n, size=k, replace=False))
        imgs = self.ctx.data.load(pos).float().div_(255.0)
        return low_band_amplitude(imgs, self.params.beta).numpy().astype(np.float32)

    def handle_other(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage != AMPLITUDE:
            return super().handle_other(stage, payload, state)
        amps = self.own_amplitudes("amplitude")
        return Payload({AMPLITUDE: {"low_band": amps}}, {"num_images": len(amps)})

    def begin(self, net: SSLNet, payload: Payload, state: ClientState) -> None:
        bank = payload.arrays.get(AMPLITUDE_BANK, {}).get("low_band")
        if bank is None or len(bank) == 0:
            log.warning(
                "client %s received an empty amplitude bank; mixing with its own "
                "amplitudes (they do not leave the client)",
                self.ctx.client_id,
            )
            bank = self.own_amplitudes("own-amplitude")
        self.bank = torch.from_numpy(np.ascontiguousarray(bank))

    def ssl_loss(
        self, net: SSLNet, view_a: torch.Tensor, view_b: torch.Tensor, x: torch.Tensor
    ) -> dict[str, Any]:
        cl, _, _ = self.simclr(net, view_a, view_b)
        return {"loss": cl, "cl": cl.detach()}

    def views(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            mixed = amplitude_mix(x, self.bank, self.generator, self.params.beta)
        a, _ = super().views(x)
        b, _ = super().views(mixed)
        return a, b


class ELCFSServer(SimCLRServer):
    """FedAvg-SSL server plus the amplitude bank (per-client, own entries excluded)."""

    client_cls = ELCFSClient

    def __init__(self, params: ELCFSParams, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.bank: dict[str, np.ndarray] = {}

    def stages(self, rnd: int) -> Sequence[str]:
        return (AMPLITUDE, FIT) if rnd == 1 or not self.bank else (FIT,)

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        if stage == AMPLITUDE:
            return round_only(clients, rnd)
        messages = super().configure(stage, rnd, clients)
        for c, msg in messages.items():
            others = [self.bank[o] for o in sorted(self.bank) if o != c]
            if others:
                msg.arrays[AMPLITUDE_BANK] = {"low_band": np.concatenate(others)}
        return messages

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if stage != AMPLITUDE:
            return super().aggregate(stage, rnd, replies)
        for cid in sorted(replies):
            amps = replies[cid].group(AMPLITUDE).get("low_band")
            ref = next(iter(self.bank.values()), amps)
            if (
                amps is None
                or amps.ndim != 4
                or ref is None
                or amps.shape[1:] != ref.shape[1:]
                or not np.isfinite(amps).all()
            ):
                raise ProtocolError(
                    f"round {rnd}: client {cid} sent an unusable amplitude upload"
                )
            self.bank[cid] = amps.astype(np.float32)
        return {"bank_entries": int(sum(len(v) for v in self.bank.values()))}

    def state(self) -> Payload:
        out = super().state()
        for cid, amps in self.bank.items():
            out.arrays[f"{AMPLITUDE_BANK}/{cid}"] = {"low_band": amps}
        return out

    def load_state(self, state: Payload) -> None:
        super().load_state(state)
        prefix = f"{AMPLITUDE_BANK}/"
        self.bank = {
            g[len(prefix) :]: arrs["low_band"]
            for g, arrs in state.arrays.items()
            if g.startswith(prefix)
        }


register_algorithm(
    "elcfs",
    ELCFSClient,
    ELCFSServer,
    ELCFSParams,
    "FedDG-ELCFS (adapted): amplitude-spectrum exchange + interpolation, SimCLR",
    wire=Wire(
        "weights and low-frequency amplitude spectra of 8 images",
        {"amplitude": "statistics", "fit": "weights"},
    ),
)
